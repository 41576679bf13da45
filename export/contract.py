"""The bundle's program contract, shared by every runtime exporter (ExecuTorch, ONNX Runtime) and the demo apps.

A training program has one method, `forward`, taking a flat, ordered list of float32 tensors and returning the
loss (scalar, output 0). The order is fixed here and written into the manifest, so a device never guesses:

    x0                      [1, C, h, w]   clean latents of the sample (cache entry "x0", or the preprocessing
                                           program's output)
    noise                   [1, C, h, w]   rng.normal(sample.noise_seed, shape)
    t                       [1]            sample.t (rectified-flow time, 1 = noise)
    cond.<key>              ...            text conditioning tensors, keys sorted (subject/text_conditioning)
    entry.<key>             ...            the cache entry's stored tensors except "x0", keys sorted (encoded form:
                                           the program decodes them itself)

Trainable parameters are named by the program (`named_parameters()`); `lora_file_keys` maps each to the key of
the diffusers LoRA file (`transformer.transformer_blocks.3.attn.to_q.lora_A.weight`). See docs/bundle_contract.md.
Nothing in this module imports diffusers, peft or an exporter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

METHOD = "forward"
FIXED_INPUTS = ("x0", "noise", "t")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(d: dict) -> "TensorSpec":
        return TensorSpec(d["name"], tuple(d["shape"]), d.get("dtype", "float32"))


def step_input_names(cond_keys, entry_keys) -> list[str]:
    return (list(FIXED_INPUTS) + [f"cond.{k}" for k in sorted(cond_keys)]
            + [f"entry.{k}" for k in sorted(entry_keys) if k != "x0"])


def flatten_step_inputs(x0, noise, t, cond: dict, entry: dict) -> tuple[list[str], list[torch.Tensor]]:
    """(names, tensors) in contract order."""
    names = step_input_names(cond, entry)
    source = {"x0": x0, "noise": noise, "t": t, **{f"cond.{k}": v for k, v in cond.items()},
              **{f"entry.{k}": v for k, v in entry.items()}}
    return names, [source[n].contiguous() for n in names]


def input_specs(names: list[str], tensors: list[torch.Tensor]) -> list[TensorSpec]:
    return [TensorSpec(n, tuple(v.shape), str(v.dtype).removeprefix("torch.")) for n, v in zip(names, tensors)]


class FlatTrainingStep(nn.Module):
    """Wraps a TrainingStep(x0, noise, t, cond, entry) as forward(*tensors) in contract order, for exporters."""

    def __init__(self, step: nn.Module, names: list[str]):
        super().__init__()
        self.step = step
        self.names = list(names)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        d = dict(zip(self.names, tensors))
        cond = {k[5:]: v for k, v in d.items() if k.startswith("cond.")}
        entry = {k[6:]: v for k, v in d.items() if k.startswith("entry.")}
        return self.step(d["x0"], d["noise"], d["t"], cond, entry)


def lora_file_key(full_model_param_name: str, adapter: str = "default", prefix: str = "transformer") -> str:
    """'transformer_blocks.3.attn.to_q.lora_A.default.weight' -> 'transformer.transformer_blocks.3.attn.to_q.lora_A.weight'
    (peft's state-dict key without the adapter name, with diffusers' component prefix)."""
    return f"{prefix}." + full_model_param_name.replace(f".{adapter}.", ".")


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
class ProgramEntry:
    """One program in the manifest (`programs` list): what a runtime needs to call it."""
    name: str                       # "train_step" | "preprocess"
    runtime: str                    # "executorch" | "ort"
    path: str                       # bundle-relative
    method: str
    inputs: list[dict]              # TensorSpec.to_json() in call order
    outputs: list[dict]
    trainable: dict[str, str]       # program parameter name -> LoRA file key ({} for inference programs)
    quant_bits: int = 16
    backend: str = "portable"
    memory: dict | None = None
    ops: dict | None = None

    def to_json(self) -> dict:
        return asdict(self)
