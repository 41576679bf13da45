"""Growing the testbed deeper without changing what it draws (a CPU-sized way to give `flux-testbed` capacity).

    committed weights (4 double + 8 single blocks) -> each new block a copy of the block before it with its residual
    gates zeroed (adaLN-Zero: the block adds gate x its output, gate 0 = the identity) -> a deeper model whose velocity
    equals the committed one's to fp rounding -> `testbed/pretrain_testbed.py --grow-single / --grow-double`
    continues pretraining from it, the gates opening as the new blocks learn

    python -m testbed.grow W.safetensors [...]   # how far each block's gates stand open (JSON)

FLUX's blocks in diffusers take their gates from an AdaLayerNormZero's `linear`: a double block's `norm1` (image
stream) and `norm1_context` (text stream) each give 6 chunks of width W (shift, scale, gate of the attention, then
of the MLP: gates at chunks 2 and 5), a single block's `norm` gives 3 (gate at chunk 2). Zeroing those rows of the
weight and bias zeroes the gates at every timestep.
"""

from __future__ import annotations

import json
import re
import sys

import torch

from ditskip_edge.models.loading import FLUX_STACKS, flux_block_counts

STACKS = {  # config key of the block count, state-dict prefix, {AdaLayerNormZero linear: (chunks, gate chunks)}
    "double": ("num_layers", FLUX_STACKS["num_layers"],
               {"norm1.linear": (6, (2, 5)), "norm1_context.linear": (6, (2, 5))}),
    "single": ("num_single_layers", FLUX_STACKS["num_single_layers"], {"norm.linear": (3, (2,))}),
}


def insert_after(n_blocks: int, n_new: int) -> list[int]:
    """The blocks each new block copies (and follows), spread evenly over the stack: 8 new in 8 blocks is one after
    each, 4 new in 8 after blocks 1, 3, 4 and 6."""
    return [min(n_blocks - 1, (k + 1) * n_blocks // (n_new + 1)) for k in range(n_new)]


def grown_order(n_blocks: int, n_new: int) -> list[tuple[int, bool]]:
    """The grown stack as (source block, is a new zero-gated copy) in order."""
    after = insert_after(n_blocks, n_new)
    order = []
    for i in range(n_blocks):
        order.append((i, False))
        order += [(i, True)] * after.count(i)
    return order


def zero_gates(block_state: dict[str, torch.Tensor], gate_rows: dict[str, tuple[int, tuple[int, ...]]],
               width: int) -> dict[str, torch.Tensor]:
    """A block's state with its residual gates' rows of the AdaLayerNormZero linears zeroed (weight and bias)."""
    out = dict(block_state)
    for linear, (chunks, gates) in gate_rows.items():
        for part in ("weight", "bias"):
            key = f"{linear}.{part}"
            value = out[key].clone()
            if value.shape[0] != chunks * width:
                raise ValueError(f"{key}: {value.shape[0]} rows, expected {chunks} x width {width}")
            for g in gates:
                value[g * width:(g + 1) * width] = 0
            out[key] = value
    return out


def grow_depth(state: dict[str, torch.Tensor], config: dict, extra_double: int = 0,
               extra_single: int = 0) -> tuple[dict[str, torch.Tensor], dict, dict[str, list[int]]]:
    """(grown state dict, grown config, {stack: indices of the new blocks in the grown stack}) of a FLUX transformer:
    `extra_double` / `extra_single` zero-gated copies inserted into each stack (`insert_after`)."""
    if extra_double < 0 or extra_single < 0:
        raise ValueError(f"blocks to add: {extra_double} double, {extra_single} single (0 or more each)")
    width = config["num_attention_heads"] * config["attention_head_dim"]
    grown_config, new_blocks = dict(config), {}
    by_block: dict[str, dict[int, dict[str, torch.Tensor]]] = {name: {} for name in STACKS}
    rest = {}
    patterns = {name: re.compile(rf"^{prefix}\.(\d+)\.(.+)$") for name, (_, prefix, _) in STACKS.items()}
    for key, value in state.items():
        for name, pattern in patterns.items():
            m = pattern.match(key)
            if m:
                by_block[name].setdefault(int(m.group(1)), {})[m.group(2)] = value
                break
        else:
            rest[key] = value
    grown = dict(rest)
    for name, extra in (("double", extra_double), ("single", extra_single)):
        count_key, prefix, gate_rows = STACKS[name]
        n_blocks = config[count_key]
        if sorted(by_block[name]) != list(range(n_blocks)):
            raise ValueError(f"{prefix}: blocks {sorted(by_block[name])} in the state, config says {n_blocks}")
        order = grown_order(n_blocks, extra)
        for j, (source, new) in enumerate(order):
            block = by_block[name][source]
            for key, value in (zero_gates(block, gate_rows, width) if new else block).items():
                grown[f"{prefix}.{j}.{key}"] = value.clone()
        grown_config[count_key] = len(order)
        new_blocks[name] = [j for j, (_, new) in enumerate(order) if new]
    return grown, grown_config, new_blocks


def gate_norms(state: dict[str, torch.Tensor]) -> dict[str, list[float]]:
    """Per stack, per block: the norm of its gate rows (weight and bias of the AdaLayerNormZero linears), 0 for a
    block just inserted by `grow_depth`; how far a grown block has opened against the blocks it was copied from."""
    width = state["x_embedder.weight"].shape[0]
    norms, counts = {}, flux_block_counts(state)
    for name, (count_key, prefix, gate_rows) in STACKS.items():
        n_blocks = counts[count_key]
        norms[name] = [round(float(torch.cat([state[f"{prefix}.{i}.{linear}.{part}"][g * width:(g + 1) * width]
                                                .flatten() for linear, (_, gates) in gate_rows.items()
                                                for part in ("weight", "bias") for g in gates]).norm()), 3)
                       for i in range(n_blocks)]
    return norms


if __name__ == "__main__":
    from safetensors.torch import load_file
    if len(sys.argv) < 2:
        sys.exit("usage: python -m testbed.grow W.safetensors [...]")
    print(json.dumps({path: gate_norms(load_file(path)) for path in sys.argv[1:]}, indent=1))
