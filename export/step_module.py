"""The training step as every exporter exports it: flat tensors in the program contract's order in, loss out.

    FlatTrainingStep(*tensors) = TrainingStep(x0, noise, t, cond, entry)     (ditskip_edge/training_step.py)

with the tensors ordered as `ditskip_edge/runtime/contract.py` says (x0, noise, t, cond.* sorted, entry.* sorted).
`program_lora_keys` maps each trainable parameter of the exported module to its LoRA file key.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from ditskip_edge.bundle_model import OpenBundle, build_skip_model
from ditskip_edge.cache.store import reader_decoder, torch_entry
from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers
from ditskip_edge.runtime.contract import COND_PREFIX, ENTRY_PREFIX, lora_file_key, step_input_names
from ditskip_edge.sample_inputs import sample_noise
from ditskip_edge.training_step import TrainingStep


def flatten_step_inputs(x0, noise, t, cond: dict, entry: dict) -> tuple[list[str], list[torch.Tensor]]:
    """(names, tensors) in contract order."""
    names = step_input_names(cond, entry)
    source = {"x0": x0, "noise": noise, "t": t, **{COND_PREFIX + k: v for k, v in cond.items()},
              **{ENTRY_PREFIX + k: v for k, v in entry.items()}}
    return names, [source[n].contiguous() for n in names]


def input_specs(names: list[str], tensors: list[torch.Tensor]) -> list[dict]:
    return [{"name": n, "shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
            for n, v in zip(names, tensors)]


class FlatTrainingStep(nn.Module):
    """Wraps a TrainingStep(x0, noise, t, cond, entry) as forward(*tensors) in contract order, for exporters."""

    def __init__(self, step: nn.Module, names: list[str]):
        super().__init__()
        self.step = step
        self.names = list(names)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        d = dict(zip(self.names, tensors))
        cond = {k[len(COND_PREFIX):]: v for k, v in d.items() if k.startswith(COND_PREFIX)}
        entry = {k[len(ENTRY_PREFIX):]: v for k, v in d.items() if k.startswith(ENTRY_PREFIX)}
        return self.step(d["x0"], d["noise"], d["t"], cond, entry)


def program_lora_keys(wrapper: nn.Module, transformer: nn.Module) -> dict[str, str]:
    """Trainable parameter name in the exported wrapper -> LoRA file key, matched by identity of the tensor."""
    full = {id(p): n for n, p in transformer.named_parameters() if p.requires_grad}
    out = {}
    for name, p in wrapper.named_parameters():
        if p.requires_grad:
            if id(p) not in full:
                raise ValueError(f"trainable parameter {name} is not a parameter of the transformer")
            out[name] = lora_file_key(full[id(p)])
    return out


@dataclass
class StepModule:
    module: FlatTrainingStep
    names: list[str]
    example: list[torch.Tensor]
    lora_keys: dict[str, str]                   # program parameter name -> LoRA file key
    transformer: nn.Module
    n_quantized: int


def example_step_inputs(b: OpenBundle, sample_index: int = 0):
    s = b.schedule.samples[sample_index]
    entry = torch_entry(b.cache, s.index)           # as stored: the program decodes in-graph
    x0 = entry.pop("x0")
    noise = sample_noise(s, tuple(x0.shape))
    return flatten_step_inputs(x0, noise, torch.tensor([s.t], dtype=torch.float32), b.cond, entry)


def build_step(b: OpenBundle, quant: QuantSpec, decoder: nn.Module | None = None) -> StepModule:
    """The exportable step: the eager SkipModel (bundle_model.build_skip_model, LoRA with full-model names) with
    every frozen nn.Linear / nn.Conv2d of the kept span, embedders and head replaced by an int8/int4 QuantLinear /
    QuantConv2d."""
    skip_model, transformer, _ = build_skip_model(b)
    n_q = quantize_frozen_layers(skip_model.view, quant)
    names, example = example_step_inputs(b)
    if decoder is None:
        decoder = reader_decoder(b.cache)           # the bundle's cache codec, decoded inside the step
    flat = FlatTrainingStep(TrainingStep(skip_model, decoder), names).eval()
    return StepModule(flat, names, example, program_lora_keys(flat, transformer), transformer, n_q)
