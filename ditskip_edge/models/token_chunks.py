"""Token-chunked MLPs for inference programs: a FLUX block's token-wise feed-forwards computed one block of tokens at
a time, so a program holds one chunk's hidden activations [chunk, 4 D] instead of all [B, N, 4 D].

    with chunked_mlp(block, 1024):
        out = block(...)            # its MLPs run per token chunk; the block's forward is diffusers' own

Module surgery, as a LoRA injection is: diffusers' block forward is untouched; for the duration of the context some of
the block's submodules compute differently (their own forward replaced on the instance, restored on exit), so every
state keeps its name inside the block (a block program's `w.<state>` inputs, the weights file's keys, the estimate's
trace: all the same):

    FluxSingleTransformerBlock   proj_mlp and act_mlp pass their input through; proj_out receives cat([attn, norm])
                                 [B, N, 2 D] and computes, per token chunk c, proj_out(cat([attn_c,
                                 act_mlp(proj_mlp(norm_c))])) with the original modules: the [B, N, 4 D] MLP
                                 activations and the [B, N, 5 D] concatenation never exist whole (and the MLP now runs
                                 after attention, not beside its scores)
    FluxTransformerBlock         ff and ff_context run per token chunk (their hidden [chunk, 4 D] at a time)

A chunk is `chunk` rows of the tokens flattened over the batch ([B N, C]): the program's matmuls stay 2-D.

Every token's output is the same computation on the same inputs (an MLP is per token): the result equals the
unchunked block up to the matmuls' rounding (a matmul of fewer rows may sum in another order). torch.export traces
through it, so an exported program gets the chunks unrolled and its memory plan reuses one chunk's buffers for the
next. Used by the generation programs (export/generation_stage.py) and by the planner's trace of them
(memory_estimate/generation.py), so both count the same program; beside models/attention.py's query chunks.
SANA's blocks are not chunked (their feed-forward is a convolution over the token grid, not per token).
"""

from __future__ import annotations

import contextlib
import types

import torch
import torch.nn as nn


def _call(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The module's own (class) forward, whatever this context put on the instance (the module's hooks are not run:
    generation registers none)."""
    return type(module).forward(module, x)


def _passthrough(self, x):
    return x


def _rows(x: torch.Tensor) -> torch.Tensor:
    """[B, N, C] -> [B N, C]: the tokens as the rows of one matrix. A row slice of it is a plain 2-D matmul operand
    (a token slice of [B, N, C] is not: torch.matmul runs it as expand + bmm, which writes out the expanded
    transposed weight)."""
    return x.reshape(-1, x.shape[-1])


def _per_chunk(self, x):
    chunk, rows = self._token_chunk, _rows(x)
    if rows.shape[0] <= chunk:
        return _call(self, x)
    out = torch.cat([_call(self, rows[i:i + chunk]) for i in range(0, rows.shape[0], chunk)])
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _single_out(self, x):
    """proj_out of a single block whose proj_mlp / act_mlp passed norm through: x = cat([attn, norm]) [B, N, 2 D]."""
    chunk, (proj_mlp, act_mlp) = self._token_chunk, self._token_chunk_mlp
    d = getattr(proj_mlp, "in_features", x.shape[-1] // 2)
    if x.shape[-1] != 2 * d:
        raise ValueError(f"token-chunked proj_out: input width {x.shape[-1]}, expected cat([attn, norm]) of {2 * d}")
    rows = _rows(x)
    outs = []
    for i in range(0, rows.shape[0], chunk):
        xc = rows[i:i + chunk]
        outs.append(_call(self, torch.cat([xc[:, :d], _call(act_mlp, _call(proj_mlp, xc[:, d:]))], dim=-1)))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _patches(block: nn.Module, chunk: int) -> list[tuple[nn.Module, object, dict]]:
    """(module, forward, extra attributes) for the block's token-wise submodules; [] for a block it does not know."""
    name = type(block).__name__
    if name == "FluxSingleTransformerBlock":
        return [(block.proj_mlp, _passthrough, {}), (block.act_mlp, _passthrough, {}),
                (block.proj_out, _single_out, {"_token_chunk": chunk,
                                               "_token_chunk_mlp": (block.proj_mlp, block.act_mlp)})]
    if name == "FluxTransformerBlock":
        return [(block.ff, _per_chunk, {"_token_chunk": chunk}),
                (block.ff_context, _per_chunk, {"_token_chunk": chunk})]
    return []


@contextlib.contextmanager
def chunked_mlp(block: nn.Module, chunk: int | None):
    """The block's MLPs in token chunks of `chunk` tokens inside the context (None: unchanged)."""
    if not chunk:
        yield block
        return
    if chunk < 1:
        raise ValueError(f"MLP chunk {chunk}: expected a positive number of tokens")
    patches = _patches(block, int(chunk))
    for module, forward, extra in patches:
        if "forward" in vars(module):
            raise RuntimeError(f"{type(module).__name__}: its forward is already replaced (nested chunked_mlp?)")
        for k, v in extra.items():
            object.__setattr__(module, k, v)          # plain attributes: not registered as submodules or states
        module.forward = types.MethodType(forward, module)
    try:
        yield block
    finally:
        for module, _, extra in patches:
            del module.forward
            for k in extra:
                object.__delattr__(module, k)
