"""Open a bundle for the host: the runtime's Bundle plus the model it was compiled for (spec, skip plan, LoRA spec),
the kept blocks with LoRA as a SkipModel, and the text conditioning as torch tensors.

A subject bundle has its schedule and (stored mode) its residual cache; a model bundle (no photos) or an x0-only or
cache-free subject bundle has no residual cache: `cache` is None, and the codec and entry shapes come from the
manifest.

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

from .lora import LoraSpec, add_lora
from .models.loading import transformer_class
from .models.specs import ModelSpec
from .models.views import make_view
from .plan import SkipPlan
from .runtime.bundle import MODEL_BUNDLE, MODEL_WEIGHTS, PER_PHOTO_TEXT, STORED, Bundle, OptimizerSpec
from .runtime.cache import CacheReader
from .runtime.cache_format import CacheCodec
from .runtime.errors import BundleError
from .runtime.schedule import Schedule, ScheduleConfig
from .skip_model import SkipModel


@dataclass
class OpenBundle:
    bundle: Bundle
    spec: ModelSpec
    plan: SkipPlan
    lora: LoraSpec
    optimizer: OptimizerSpec
    schedule_config: ScheduleConfig
    cond: dict[str, torch.Tensor]        # photo 0's text conditioning, batch 1 (the prompt's; see cond_for)
    kept_block_names: list[str]
    codec: CacheCodec
    entry_shapes: dict[str, tuple[int, ...]]
    schedule: Schedule | None = None      # None: a model bundle
    cache: CacheReader | None = None      # None: a model bundle or a cache-free subject bundle

    @property
    def root(self) -> Path:
        return self.bundle.root

    def cond_for(self, photo: int) -> dict[str, torch.Tensor]:
        """The text conditioning photo `photo`'s samples train with: `cond`, or with per-photo captions its row."""
        if self.bundle.kind == MODEL_BUNDLE or self.bundle.text_rows != PER_PHOTO_TEXT:
            return self.cond
        return {k: torch.from_numpy(v) for k, v in self.bundle.text_conditioning(photo).items()}

    @property
    def manifest(self) -> dict:
        return self.bundle.manifest


def open_bundle(bundle: str | Path | Bundle, verify: bool = True) -> OpenBundle:
    """A bundle folder (its manifest and files verified), or a Bundle already open (e.g. one being written)."""
    b = bundle if isinstance(bundle, Bundle) else Bundle.open(bundle, verify=verify)
    try:
        spec = ModelSpec.from_json(b.field("model"))
        plan = SkipPlan.from_json(b.field("plan"))
        lora = LoraSpec(**b.field("lora"))
        kept_names = list(b.field("model_stage", "kept_block_names"))
    except (KeyError, TypeError, ValueError) as e:
        raise BundleError(f"{b.root / 'manifest.json'}: malformed field ({type(e).__name__}: {e})") from e
    if b.kind == MODEL_BUNDLE:
        cond_np, schedule, cache = b.prompt_conditioning(0), None, None
        try:
            sched_cfg = ScheduleConfig(**b.field("schedule"))
        except TypeError as e:
            raise BundleError(f"{b.root / 'manifest.json'}: malformed field schedule ({e})") from e
    else:
        cond_np, schedule = b.text_conditioning(0), b.schedule      # photo 0's (per-photo captions: one row)
        sched_cfg = schedule.config
        cache = b.cache() if b.cache_mode == STORED else None
    cond = {k: torch.from_numpy(v) for k, v in cond_np.items()}
    codec = cache.codec if cache is not None else CacheCodec.parse(b.codec_spec)
    shapes = cache.shapes if cache is not None else b.entry_shapes
    return OpenBundle(b, spec, plan, lora, b.optimizer, sched_cfg, cond, kept_names, codec, shapes, schedule, cache)


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
        torch.manual_seed(b.schedule_config.seed)
        names = add_lora(transformer, b.spec.arch, b.kept_block_names, b.lora)
    view = make_view(b.spec.arch, transformer, b.plan.kept)
    missing = [n for n, p in view.named_parameters() if p.is_meta]
    if missing:
        raise BundleError(f"{b.root / MODEL_WEIGHTS}: kept weights missing, e.g. {missing[:3]}")
    return SkipModel(view, b.plan), transformer, names
