"""Open a bundle for the eager runtime: the kept blocks with LoRA as a SkipModel, the schedule, text, cache.

The transformer is built on the meta device from its config and only the bundle's kept weights are loaded into it
(`assign=True`), so skipped blocks never take memory; LoRA is injected into the full-model object so its names are
the full model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import load_file

from .bundle import read_manifest
from .compile import CACHE_DIR, MODEL_WEIGHTS, SCHEDULE_FILE, TEXT_FILE, OptimizerSpec, cache_identity
from .errors import BundleError
from .lora import LoraSpec, add_lora
from .models.loading import transformer_class
from .models.specs import ModelSpec
from .models.views import make_view
from .plan import SkipPlan
from .residual_cache import CacheReader
from .schedule import Schedule
from .skip_model import SkipModel


@dataclass
class OpenBundle:
    root: Path
    manifest: dict
    spec: ModelSpec
    plan: SkipPlan
    lora: LoraSpec
    optimizer: OptimizerSpec
    schedule: Schedule
    cond: dict[str, torch.Tensor]
    cache: CacheReader
    kept_block_names: list[str]


def open_bundle(bundle_dir: str | Path, verify: bool = True, manifest: dict | None = None) -> OpenBundle:
    """`manifest`: use this one instead of reading BUNDLE/manifest.json (a bundle still being written)."""
    root = Path(bundle_dir)
    if manifest is None:
        manifest = read_manifest(root, verify=verify)
    try:
        spec = ModelSpec.from_json(manifest["model"])
        plan = SkipPlan.from_json(manifest["plan"])
        lora = LoraSpec(**manifest["lora"])
        opt = manifest["optimizer"]
        optimizer = OptimizerSpec(lr=opt["lr"], betas=tuple(opt["betas"]), eps=opt["eps"],
                                  weight_decay=opt["weight_decay"])
        kept_names = manifest["model_stage"]["kept_block_names"]
    except (KeyError, TypeError) as e:
        raise BundleError(f"{root / 'manifest.json'}: missing or malformed field {e}") from e
    schedule = Schedule.load(root / SCHEDULE_FILE)
    cond = load_file(str(root / TEXT_FILE))
    cache = CacheReader(root / CACHE_DIR, cache_identity(spec, plan, schedule))
    return OpenBundle(root, manifest, spec, plan, lora, optimizer, schedule, cond, cache, kept_names)


def load_kept_transformer(b: OpenBundle) -> nn.Module:
    cls = transformer_class(b.spec.arch)
    with torch.device("meta"):
        transformer = cls.from_config(b.spec.transformer_config).eval()
    sd = load_file(str(b.root / MODEL_WEIGHTS))
    result = transformer.load_state_dict(sd, strict=False, assign=True)
    if result.unexpected_keys:
        raise BundleError(f"{b.root / MODEL_WEIGHTS}: unexpected weights {result.unexpected_keys[:3]}")
    return transformer


def build_skip_model(b: OpenBundle) -> tuple[SkipModel, nn.Module, list[str]]:
    """SkipModel over the kept blocks with fresh LoRA (B = 0); returns it, the transformer, trainable names."""
    transformer = load_kept_transformer(b)
    with torch.random.fork_rng():       # LoRA A's random init is a function of the bundle: every run starts alike
        torch.manual_seed(b.schedule.config.seed)
        names = add_lora(transformer, b.spec.arch, b.kept_block_names, b.lora)
    view = make_view(b.spec.arch, transformer, b.plan.kept)
    missing = [n for n, p in view.named_parameters() if p.is_meta]
    if missing:
        raise BundleError(f"{b.root / MODEL_WEIGHTS}: kept weights missing, e.g. {missing[:3]}")
    return SkipModel(view, b.plan), transformer, names
