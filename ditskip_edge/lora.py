"""LoRA on the kept blocks, through diffusers' PeftAdapterMixin (peft underneath), and the diffusers-loadable file.

Module names are the full model's (`transformer_blocks.7.attn.to_q`), because LoRA is injected into the full
diffusers transformer object whose skipped blocks are never materialised. So the saved LoRA needs no renaming:
`FluxPipeline.save_lora_weights` / `SanaPipeline.save_lora_weights` write the file `load_lora_weights` reads.
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from .models.specs import FLUX_ARCH
from .runtime.errors import UserError

LORA_FILE = "pytorch_lora_weights.safetensors"

DEFAULT_TARGETS = {
    FLUX_ARCH: ["attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0"],        # diffusers DreamBooth FLUX default
    "sana": ["attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
             "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0"],
}


MAX_RANK = 1024
ALL_LINEAR = "all-linear"          # --lora-targets all-linear: every nn.Linear inside a block (peft's term)


def every_linear_suffix(arch: str, transformer_config: dict) -> list[str]:
    """The module-name suffixes of every nn.Linear inside a transformer block of this architecture and config (FLUX:
    both streams' attention projections, feed-forwards, adaLN modulations, proj_mlp / proj_out; sorted), from a
    model built on the meta device (no weights)."""
    from .models.loading import transformer_class
    from .models.views import block_names_of
    with torch.device("meta"):
        model = transformer_class(arch).from_config(transformer_config)
    return sorted({name for block in block_names_of(model)
                   for name, mod in model.get_submodule(block).named_modules() if isinstance(mod, nn.Linear)})


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 4
    alpha: float = 4.0
    targets: list[str] = field(default_factory=list)   # module-name suffixes inside a block; [] = arch default

    def validate(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 1 <= self.rank <= MAX_RANK:
            raise UserError(f"rank must be an integer in [1, {MAX_RANK}], got {self.rank!r}")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise UserError(f"alpha must be a positive number, got {self.alpha!r}")
        bad = [t for t in self.targets if not re.fullmatch(r"[A-Za-z0-9_.]+", t)]
        if bad:
            raise UserError(f"lora targets {bad}: expected module-name suffixes such as attn.to_q")

    def targets_for(self, arch: str) -> list[str]:
        return list(self.targets) or DEFAULT_TARGETS[arch]

    def to_json(self) -> dict:
        return asdict(self)


def target_regex(block_names: list[str], suffixes: list[str]) -> str:
    blocks = "|".join(re.escape(b) for b in block_names)
    mods = "|".join(re.escape(s) for s in suffixes)
    return rf"^({blocks})\.({mods})$"


def peft_config(arch: str, kept_block_names: list[str], spec: LoraSpec):
    from peft import LoraConfig
    return LoraConfig(r=spec.rank, lora_alpha=spec.alpha, init_lora_weights=True, lora_dropout=0.0,
                      target_modules=target_regex(kept_block_names, spec.targets_for(arch)))


def add_lora(transformer: nn.Module, arch: str, kept_block_names: list[str], spec: LoraSpec) -> list[str]:
    """Inject LoRA (B = 0: the model is unchanged) into the kept blocks; freeze everything else.
    Returns the names of the trainable parameters."""
    transformer.add_adapter(peft_config(arch, kept_block_names, spec))
    names = []
    for name, p in transformer.named_parameters():
        trainable = "lora_" in name
        p.requires_grad_(trainable)
        if trainable:
            names.append(name)
    if not names:
        raise ValueError(f"no LoRA target matched {spec.targets_for(arch)} in blocks {kept_block_names[:3]}...")
    return names


def lora_state_dict(transformer: nn.Module) -> dict[str, torch.Tensor]:
    """peft-format LoRA weights with full-model names (`transformer_blocks.3.attn.to_q.lora_A.weight`)."""
    from peft.utils import get_peft_model_state_dict
    return {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(transformer).items()}


def save_lora(arch: str, state_dict: dict[str, torch.Tensor], out_dir: Path, spec: LoraSpec,
              kept_block_names: list[str]) -> Path:
    from diffusers import FluxPipeline, SanaPipeline
    cls = FluxPipeline if arch == FLUX_ARCH else SanaPipeline
    cfg = peft_config(arch, kept_block_names, spec).to_dict()
    cfg = {k: (sorted(v) if isinstance(v, set) else v) for k, v in cfg.items()}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cls.save_lora_weights(out_dir, transformer_lora_layers=state_dict, weight_name=LORA_FILE,
                          transformer_lora_adapter_metadata=cfg)
    return out_dir / LORA_FILE


def lora_file_record(arch: str, transformer_config: dict, kept_block_names: list[str], spec: LoraSpec) -> dict:
    """The manifest's `lora_file`: the name, keys and safetensors metadata of the file diffusers' save_lora_weights
    writes for this LoRA, taken from a dry run on zero tensors of the LoRA's shapes (no weights needed), so that
    every runtime writes the identical format (runtime/lora_file.py)."""
    from safetensors import safe_open

    from .models.loading import transformer_class
    with torch.device("meta"):
        transformer = transformer_class(arch).from_config(transformer_config)
    add_lora(transformer, arch, kept_block_names, spec)
    zeros = {k: torch.zeros(v.shape) for k, v in lora_state_dict_meta(transformer).items()}
    with tempfile.TemporaryDirectory() as d:
        path = save_lora(arch, zeros, Path(d), spec, kept_block_names)
        with safe_open(str(path), "np") as f:
            return {"name": path.name, "keys": sorted(f.keys()), "metadata": dict(f.metadata() or {})}


def lora_state_dict_meta(transformer: nn.Module) -> dict[str, torch.Tensor]:
    from peft.utils import get_peft_model_state_dict
    return dict(get_peft_model_state_dict(transformer))
