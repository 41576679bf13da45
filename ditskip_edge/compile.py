"""The host compiler: photos + prompt + model -> bundle, as a chain of stages with plain artifacts.

Model-level stage (once per model and plan): `compile_model_stage` writes the kept blocks' frozen weights (plus
the embedders and the head) and the transformer config under `model/`. Skipped blocks' weights are not written.

Subject-level stage (once per user's photos): `compile_subject_stage` writes under `subject/` the normalised
photos, the text conditioning, the schedule, and the residual cache (clean latents + residuals per sample).
It runs the frozen full model one sample at a time: memory is bounded by one sample's activations.

`compile_bundle` runs both into one atomically written bundle.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import save_file
from tqdm import tqdm

from . import __version__
from .bundle import BundleWriter
from .errors import UserError
from .images import Photo, load_photos, to_uint8_image
from .lora import LoraSpec
from .models.latents import LatentEncoder
from .models.loading import build_transformer, build_vae, resolve_spec
from .models.specs import ModelSpec
from .models.text import encode_prompt
from .models.views import block_names_of, make_view
from .patch_sampling import PatchSampler
from .plan import SkipPlan
from .quantize import QuantSpec
from .residual_cache import DEFAULT_CODEC, CacheCodec, CacheWriter
from .sample_inputs import clean_latents, sample_noise
from .schedule import Schedule, ScheduleConfig, make_schedule
from .skip_model import compute_residuals

log = logging.getLogger(__name__)

MODEL_WEIGHTS = "model/kept_weights.safetensors"
SCHEDULE_FILE = "subject/schedule.json"
TEXT_FILE = "subject/text_conditioning.safetensors"
CACHE_DIR = "subject/cache"
PHOTOS_DIR = "subject/photos"
CACHE_WARN_REL_ERROR = 0.05     # compile warns when a residual's coding error exceeds this (||d_hat - d|| / ||d||)


@dataclass(frozen=True)
class OptimizerSpec:
    """AdamW, as torch.optim.AdamW computes it (the reference for every runtime's own implementation)."""
    lr: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 1e-4


@dataclass
class CompileRequest:
    model: str
    images: str
    prompt: str
    out: str
    n_front: int | None = None
    n_back: int | None = None
    skip_ratio: float | None = None
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    lora: LoraSpec = field(default_factory=LoraSpec)
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    cache_codec: str = DEFAULT_CODEC      # residual-cache codec spec (ditskip_edge/cache/codecs.py)
    overwrite: bool = False
    runtimes: list[str] = field(default_factory=list)           # device runtimes to compile programs for
    quant: QuantSpec = field(default_factory=QuantSpec)         # ort: frozen weights in the device programs
    runtime_options: dict = field(default_factory=dict)         # runtime name -> options for its stage (executorch)


# Device-runtime stages, run after the subject stage: name -> "module:function". The ExecuTorch stage takes
# (writer, options), the ORT stage (writer, request) (merged from issue5-executorch and issue6-ort).
RUNTIME_STAGES = {"executorch": "export.executorch_stage:add_to_bundle", "ort": "export.ort_stage:add_to_bundle"}


def check_runtimes(names: list[str]) -> None:
    for name in names:
        if name not in RUNTIME_STAGES:
            raise UserError(f"unknown runtime {name!r}: expected one of {', '.join(RUNTIME_STAGES)}")
    if "executorch" in names and "ort" in names:
        # The two stages write incompatible manifest layouts: executorch a list of ProgramEntry under `programs`,
        # ort a dict {"ort": section} under `programs` (docs/bundle_contract.md, "Known gaps").
        raise UserError("--runtime executorch and --runtime ort cannot share one bundle yet (their manifest "
                        "`programs` layouts differ): compile one bundle per runtime")


def run_runtime_stage(name: str, writer: BundleWriter, req: "CompileRequest") -> dict:
    import importlib
    check_runtimes([name])
    module, func = RUNTIME_STAGES[name].split(":")
    fn = getattr(importlib.import_module(module), func)
    if name == "ort":
        return fn(writer, req)
    return fn(writer, req.runtime_options.get(name, {}))


def kept_state_dict(transformer: nn.Module, plan: SkipPlan) -> dict[str, torch.Tensor]:
    """The transformer's weights minus the skipped blocks'."""
    names = block_names_of(transformer)
    skipped = tuple(names[i] + "." for i in plan.front + plan.back)
    return {k: v.detach().contiguous() for k, v in transformer.state_dict().items() if not k.startswith(skipped)}


def compile_model_stage(writer: BundleWriter, spec: ModelSpec, transformer: nn.Module, plan: SkipPlan,
                        lora: LoraSpec, optimizer: OptimizerSpec) -> dict:
    sd = kept_state_dict(transformer, plan)
    save_file(sd, str(writer.path(MODEL_WEIGHTS)))
    names = block_names_of(transformer)
    stage = {"weights": MODEL_WEIGHTS, "kept_block_names": [names[i] for i in plan.kept],
             "kept_weight_bytes": sum(v.numel() * v.element_size() for v in sd.values())}
    writer.manifest.update(model=spec.to_json(), plan=plan.to_json(), lora=lora.to_json(),
                           optimizer=asdict(optimizer), model_stage=stage)
    return stage


def compile_subject_stage(writer: BundleWriter, spec: ModelSpec, transformer: nn.Module, vae: nn.Module,
                          photos: list[Photo], prompt: str, schedule_cfg: ScheduleConfig, plan: SkipPlan,
                          cache_codec: str = DEFAULT_CODEC) -> dict:
    schedule = make_schedule(schedule_cfg, [tuple(p.pixels.shape[1:]) for p in photos], [p.name for p in photos])
    schedule.save(writer.path(SCHEDULE_FILE))
    for i, p in enumerate(photos):
        to_uint8_image(p.pixels).save(writer.path(f"{PHOTOS_DIR}/{i:03d}.png"))
    cond = encode_prompt(spec, prompt)
    save_file({k: v.contiguous() for k, v in cond.items()}, str(writer.path(TEXT_FILE)))

    full_view = make_view(spec.arch, transformer)
    sampler = PatchSampler(schedule_cfg.s_min_px)
    encoder = LatentEncoder(spec.arch, vae)
    identity = cache_identity(spec, plan, schedule)
    cache = CacheWriter(writer.path(CACHE_DIR), identity, cache_codec)
    t0 = time.perf_counter()
    for s in tqdm(schedule.samples, desc="residual cache", unit="sample", leave=False):
        x0 = clean_latents(photos[s.photo].pixels, s, sampler, encoder)
        noise = sample_noise(s, tuple(x0.shape))
        t = torch.tensor([s.t])
        residuals = compute_residuals(full_view, plan, x0, noise, t, cond)
        cache.add(s.index, {"x0": x0, **residuals})
    index = cache.finish()
    for name, err in index["rel_error"].items():
        if err["max"] > CACHE_WARN_REL_ERROR:
            log.warning("residual cache codec %s: %s has relative error up to %.1f%% (mean %.1f%%); consider a finer "
                        "--cache-codec", index["codec"]["spec"], name, 100 * err["max"], 100 * err["mean"])
    stage = {"schedule": SCHEDULE_FILE, "text_conditioning": TEXT_FILE, "cache": CACHE_DIR,
             "photos": [f"{PHOTOS_DIR}/{i:03d}.png" for i in range(len(photos))], "prompt": prompt,
             "num_samples": schedule.num_samples, "clamped_crops": schedule.clamped_samples,
             "entry_shapes": index["shapes"], "cache_codec": index["codec"]["spec"],
             "cache_rel_error": index["rel_error"],
             "cache_entry_bytes": index["entry_bytes"], "seconds": round(time.perf_counter() - t0, 3)}
    writer.manifest.update(schedule=schedule.to_json()["config"], subject_stage=stage)
    return stage


def cache_identity(spec: ModelSpec, plan: SkipPlan, schedule: Schedule) -> dict:
    return {"model": spec.name, "transformer_config": spec.transformer_config, "plan": [plan.num_blocks,
            plan.n_front, plan.n_back], "schedule": schedule.to_json()}


def resolve_plan(req: CompileRequest, spec: ModelSpec, num_blocks: int, transformer=None, vae=None,
                 photos=None) -> SkipPlan:
    if req.n_front is not None or req.n_back is not None:
        if req.skip_ratio is not None:
            raise UserError("give either --skip-front/--skip-back or --skip-ratio, not both")
        return SkipPlan(num_blocks, req.n_front or 0, req.n_back or 0, "explicit")
    if req.skip_ratio is None:
        raise UserError("give a skip plan: --skip-front N --skip-back M, or --skip-ratio R")
    from .selection import select_plan   # block selection by cross-attention masking (PAPER.md section 3)
    return select_plan(spec, transformer, vae, photos, req.prompt, req.skip_ratio, seed=req.schedule.seed)


def compile_bundle(req: CompileRequest) -> dict:
    spec = resolve_spec(req.model)
    if not spec.has_weights:
        raise UserError(f"model '{spec.name}' has no weights here: compile needs a built-in tiny model or a local "
                        f"diffusers folder")
    if not req.prompt or not req.prompt.strip():
        raise UserError("prompt is empty: describe the subject, e.g. 'a photo of sks cat'")
    sched = req.schedule
    if sched.multiple_px != spec.pixel_multiple:
        sched = ScheduleConfig(**{**asdict(sched), "multiple_px": spec.pixel_multiple})
    sched.validate()
    codec = CacheCodec.parse(req.cache_codec).spec      # a bad codec spec fails before any work
    photos = load_photos(req.images, sched.s_max_px)
    writer = BundleWriter(req.out, overwrite=req.overwrite)
    log.info("loading %s", spec.name)
    transformer = build_transformer(spec)
    vae = build_vae(spec)
    plan = resolve_plan(req, spec, len(block_names_of(transformer)), transformer, vae, photos)
    check_runtimes(req.runtimes)
    with writer:
        writer.manifest["created_by"] = f"ditskip-edge {__version__}"
        model_stage = compile_model_stage(writer, spec, transformer, plan, req.lora, req.optimizer)
        subject_stage = compile_subject_stage(writer, spec, transformer, vae, photos, req.prompt, sched, plan, codec)
        runtime_stages = {r: run_runtime_stage(r, writer, req) for r in req.runtimes}
    return {"bundle": str(Path(req.out).resolve()), "model": spec.name, "plan": plan.to_json(),
            "kept_blocks": len(plan.kept), "num_samples": subject_stage["num_samples"],
            "clamped_crops": subject_stage["clamped_crops"], "kept_weight_bytes": model_stage["kept_weight_bytes"],
            "cache_codec": codec, "cache_entry_bytes": subject_stage["cache_entry_bytes"],
            **({"runtimes": runtime_stages} if runtime_stages else {})}
