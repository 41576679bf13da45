"""The host compiler: photos + prompt + model -> bundle, as a chain of stages with plain artifacts.

    check_request            every input checked before any work (ranges, photos, codec, program configs)
    compile_model_stage      model/: the kept blocks' frozen weights (plus embedders and head), the transformer
                             config, the skip plan, the LoRA spec and its file format; skipped blocks are not written
    compile_subject_stage    subject/: normalised photos, text conditioning, the schedule, the residual cache
                             (clean latents + residuals per sample); the frozen full model runs one sample at a time
    program stages           programs/<runtime>/: add_executorch_programs(writer, ExecutorchPrograms(...)),
                             add_ort_programs(writer, OrtPrograms(...)), and the generation part
                             add_generation_programs(writer, GenerationPrograms(...)) (export/)
    subject programs         programs/executorch/subject/: encode, embed and one forward program per skipped-span
                             block (export/executorch_subject.py), for the subject stage on the device

`compile_bundle` runs them into one atomically written bundle (runtime/bundle.py: nothing is left behind on error):
with photos (`images`) a subject bundle, compiled on the host; without, a *model bundle* (`compile_model_bundle`):
the model stage, the prompts' text conditioning, the schedule's parameters, the training program(s) and the subject
programs, and no photo, latent or residual: a phone runs the subject stage itself (runtime/subject.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import save_file
from tqdm import tqdm

from ditskip_edge import __version__
from ditskip_edge.cache import DEFAULT_CODEC, DEFAULT_DEVICE_CODEC
from ditskip_edge.cache.store import ResidualCacheWriter
from ditskip_edge.images import Photo, load_photos, to_uint8_image
from ditskip_edge.lora import LoraSpec, lora_file_record
from ditskip_edge.models.latents import LatentEncoder, encode_tiling
from ditskip_edge.models.loading import build_transformer, build_vae, resolve_spec
from ditskip_edge.models.specs import ModelSpec
from ditskip_edge.models.text import encode_prompt
from ditskip_edge.models.views import block_names_of, make_view
from ditskip_edge.patch_sampling import PatchSampler
from ditskip_edge.plan import SkipPlan
from ditskip_edge.runtime.bundle import (CACHE_DIR, MODEL_BUNDLE, MODEL_WEIGHTS, PER_PHOTO_TEXT, PHOTOS_DIR,
                                         PROMPTS_DIR, SCHEDULE_FILE, SHARED_TEXT, STORED, SUBJECT_BUNDLE, TEXT_FILE,
                                         BundleWriter, OptimizerSpec, cache_identity)
from ditskip_edge.runtime.cache_format import CacheCodec, entry_layout
from ditskip_edge.runtime.errors import UserError
from ditskip_edge.runtime.photos import read_captions
from ditskip_edge.runtime.schedule import ScheduleConfig, check_photo_sizes, make_schedule
from ditskip_edge.sample_inputs import clean_latents, sample_noise
from ditskip_edge.skip_model import compute_residuals
from export.executorch_stage import ExecutorchPrograms
from export.executorch_subject import SubjectPrograms, add_subject_programs, entry_shapes, forward_examples

from .stage_worker import PROGRAM_STAGES, StageWorker, subject_independent

log = logging.getLogger(__name__)

CACHE_BATCH_SAMPLES = 16       # samples through the frozen full model per forward while the host computes the cache:
                                # one at a time spends most of a small model's time in per-op overhead
                                # (benchmarks/cache_batch.py); the device's subject stage runs one at a time
CACHE_BATCH_TOKENS = 2048       # ... and at most this many stream tokens per forward, so a full-size model (FLUX.1-dev
                                # at 256 px: 768 tokens a sample -> 2 samples) adds little to the host's peak; its
                                # forward is compute-bound, so larger batches would gain little there anyway
CACHE_WARN_REL_ERROR = 0.05     # compile warns when a residual's coding error exceeds this (||d_hat - d|| / ||d||)
MAX_PROMPT_CHARS = 2000
MAX_LR = 1.0


@dataclass
class CompileRequest:
    model: str
    images: str | None                    # None: a model bundle (no photos)
    prompt: str
    out: str
    n_front: int | None = None
    n_back: int | None = None
    skip_ratio: float | None = None
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    lora: LoraSpec = field(default_factory=LoraSpec)
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    cache_codec: str | None = None        # residual-cache codec spec (runtime/cache_format.py); None: DEFAULT_CODEC,
                                          # or for a model bundle (no images) DEFAULT_DEVICE_CODEC (no lowrank)
    overwrite: bool = False
    programs: list = field(default_factory=list)   # device program stages: ExecutorchPrograms / OrtPrograms
    more_prompts: list[str] = field(default_factory=list)   # model bundle: prompts besides `prompt`
    subject_programs: SubjectPrograms | None = None        # model bundle: the subject stage's forward programs
    min_photos: int = 1                   # model bundle: the fewest photos its subject stage accepts
    encode_tile_px: int | None = None     # the encoder on pixel tiles of this side (diffusers' tiled_encode), on the
                                          # host and in the model bundle's encode programs; None: whole crops
    jobs: int = 1                         # 2: the program stages that need no subject (generation) are exported by
                                          # a second process beside the subject stage (stage_worker.py)
    photo_captions: bool = False          # each photo trained with its own caption (<photo>.txt beside it) instead
                                          # of `prompt` (which selection still uses)

    def __post_init__(self):
        if self.cache_codec is None:
            self.cache_codec = DEFAULT_DEVICE_CODEC if self.images is None else DEFAULT_CODEC


def check_request(req: CompileRequest, spec: ModelSpec) -> ScheduleConfig:
    """Refuse a bad request with one line before any work. Returns the schedule config for this model."""
    for prompt in [req.prompt, *req.more_prompts]:
        if not prompt or not prompt.strip():
            raise UserError("prompt is empty: describe the subject, e.g. 'a photo of sks cat'")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise UserError(f"prompt has {len(prompt)} characters: at most {MAX_PROMPT_CHARS}")
    check_prompts_fit(spec, [("prompt", p) for p in [req.prompt, *req.more_prompts]])
    if req.images is not None and (req.more_prompts or req.subject_programs is not None):
        raise UserError("several prompts and the subject programs make a model bundle: leave out --images")
    if req.images is None and req.photo_captions:
        raise UserError("per-photo captions come beside the photos: give --images (a model bundle has no photos)")
    if len(set([req.prompt, *req.more_prompts])) != 1 + len(req.more_prompts):
        raise UserError("the same prompt is given twice")
    from ditskip_edge.runtime.photos import MAX_PHOTOS
    if not 1 <= req.min_photos <= MAX_PHOTOS:
        raise UserError(f"min-photos must be in [1, {MAX_PHOTOS}], got {req.min_photos}")
    sched = req.schedule
    if sched.multiple_px != spec.pixel_multiple:
        sched = ScheduleConfig(**{**asdict(sched), "multiple_px": spec.pixel_multiple})
    sched.validate()
    req.lora.validate()
    o = req.optimizer
    if not 0.0 < o.lr <= MAX_LR:
        raise UserError(f"lr must be in (0, {MAX_LR}], got {o.lr!r}")
    CacheCodec.parse(req.cache_codec)
    if req.n_front is not None or req.n_back is not None:
        if req.skip_ratio is not None:
            raise UserError("give either --skip-front/--skip-back or --skip-ratio, not both")
    elif req.skip_ratio is None:
        raise UserError("give a skip plan: --skip-front N --skip-back M, or --skip-ratio R")
    elif not 0.0 < req.skip_ratio < 1.0:
        raise UserError(f"skip ratio must be in (0, 1), got {req.skip_ratio}")
    for stage in req.programs:
        if type(stage) not in PROGRAM_STAGES:
            raise UserError(f"unknown program stage {stage!r}")
        stage.validate()
        if hasattr(stage, "check_model"):
            stage.check_model(spec)
    if req.subject_programs is not None:
        req.subject_programs.validate()
        if req.subject_programs.encode_stages and (spec.vae_config or {}).get("kind") == "pixel":
            raise UserError(f"--encode-stages: {spec.name} encodes by a pixel (un)shuffle, there is no encoder to "
                            f"split")
    if req.jobs not in (1, 2):
        raise UserError(f"--jobs {req.jobs}: expected 1 (one process) or 2 (the generation programs exported by a "
                        f"second process)")
    if req.encode_tile_px is not None and req.encode_tile_px <= 0:
        raise UserError(f"--encode-tile-px {req.encode_tile_px}: expected a positive number of pixels")
    encode_tiling(spec, sched.s_min_px, req.encode_tile_px)           # tiles this autoencoder can take
    return sched


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
    kept = [names[i] for i in plan.kept]
    stage = {"weights": MODEL_WEIGHTS, "kept_block_names": kept,
             "kept_weight_bytes": sum(v.numel() * v.element_size() for v in sd.values())}
    writer.manifest.update(model=spec.to_json(), plan=plan.to_json(), lora=lora.to_json(),
                           optimizer=optimizer.to_json(), model_stage=stage,
                           lora_file=lora_file_record(spec.arch, spec.transformer_config, kept, lora))
    return stage


def _check_disk(out_dir: Path, entry_bytes: int, num_samples: int) -> None:
    need = entry_bytes * num_samples
    free = shutil.disk_usage(out_dir).free
    if need > free:
        raise UserError(f"the residual cache needs {need / 2**30:.2f} GiB ({num_samples} samples x {entry_bytes} "
                        f"bytes) and {out_dir} has {free / 2**30:.2f} GiB free: fewer --steps / --grad-accum or a "
                        f"smaller --cache-codec")


def compile_subject_stage(writer: BundleWriter, spec: ModelSpec, transformer: nn.Module, vae: nn.Module,
                          photos: list[Photo], prompt: str, schedule_cfg: ScheduleConfig, plan: SkipPlan,
                          cache_codec: str = DEFAULT_CODEC, encode_tile_px: int | None = None,
                          captions: list[str] | None = None) -> dict:
    """`captions`: one per photo (per-photo captions: photo i's samples train with captions[i], its residuals are
    computed with it, and the text conditioning stores one row per photo); None: `prompt` for every photo."""
    if captions is not None and len(captions) != len(photos):
        raise ValueError(f"{len(captions)} captions for {len(photos)} photos")
    schedule = make_schedule(schedule_cfg, [tuple(p.pixels.shape[1:]) for p in photos], [p.name for p in photos])
    schedule.save(writer.path(SCHEDULE_FILE))
    for i, p in enumerate(photos):
        to_uint8_image(p.pixels).save(writer.path(f"{PHOTOS_DIR}/{i:03d}.png"))
    rows = [encode_prompt(spec, c) for c in captions] if captions is not None else [encode_prompt(spec, prompt)]
    save_file({k: torch.cat([r[k] for r in rows]).contiguous() for k in rows[0]}, str(writer.path(TEXT_FILE)))

    full_view = make_view(spec.arch, transformer)
    sampler = PatchSampler(schedule_cfg.s_min_px)
    tiling = encode_tiling(spec, schedule_cfg.s_min_px, encode_tile_px)
    encoder = LatentEncoder(spec.arch, vae, tiling)          # tiled: diffusers' own tiled_encode
    identity = cache_identity(writer.manifest["model"], writer.manifest["plan"], schedule)
    cache = ResidualCacheWriter(writer.path(CACHE_DIR), identity, cache_codec)
    t0 = time.perf_counter()

    def latents(s) -> torch.Tensor:
        return clean_latents(photos[s.photo].pixels, s, sampler, encoder)

    def entries(samples, x0: list[torch.Tensor] | None = None) -> list[dict[str, torch.Tensor]]:
        """The cache entries of `samples` (x0: their clean latents, if already encoded): their crops through the
        frozen full model together (one batch)."""
        x0 = x0 or [latents(s) for s in samples]
        if len({tuple(x.shape) for x in x0}) > 1:          # crops of different latent sizes: one at a time
            return [e for s, x in zip(samples, x0) for e in entries([s], [x])]
        cond = {k: torch.cat([(rows[s.photo] if captions is not None else rows[0])[k] for s in samples])
                for k in rows[0]}
        noise = torch.cat([sample_noise(s, tuple(x.shape)) for s, x in zip(samples, x0)])
        residuals = compute_residuals(full_view, plan, torch.cat(x0), noise, torch.tensor([s.t for s in samples]),
                                      cond)
        return [{"x0": x, **{k: v[i:i + 1] for k, v in residuals.items()}} for i, x in enumerate(x0)]

    first_x0 = latents(schedule.samples[0])
    per_batch = cache_batch_samples(full_view, first_x0, rows[0])
    batches = [schedule.samples[i:i + per_batch] for i in range(0, schedule.num_samples, per_batch)]
    # the first entry's size says whether the whole cache fits on the disk
    first = entries(batches[0], [first_x0, *map(latents, batches[0][1:])])
    _, entry_bytes = entry_layout(cache.codec, {k: tuple(v.shape) for k, v in first[0].items()})
    _check_disk(writer.root, entry_bytes, schedule.num_samples)
    with tqdm(total=schedule.num_samples, desc="residual cache", unit="sample", leave=False) as bar:
        for batch, done in zip(batches, itertools.chain([first], map(entries, batches[1:]))):
            for s, e in zip(batch, done):
                cache.add(s.index, e)
            bar.update(len(batch))
    index = cache.finish()
    for name, err in index["rel_error"].items():
        if err["max"] > CACHE_WARN_REL_ERROR:
            log.warning("residual cache codec %s: %s has relative error up to %.1f%% (mean %.1f%%); consider a finer "
                        "--cache-codec", index["codec"]["spec"], name, 100 * err["max"], 100 * err["mean"])
    stage = {"schedule": SCHEDULE_FILE, "text_conditioning": TEXT_FILE, "cache": CACHE_DIR,
             "photos": [f"{PHOTOS_DIR}/{i:03d}.png" for i in range(len(photos))], "prompt": prompt,
             "text_rows": SHARED_TEXT if captions is None else PER_PHOTO_TEXT,
             **({} if captions is None else {"photo_captions": list(captions)}),
             "num_samples": schedule.num_samples, "clamped_crops": schedule.clamped_samples,
             "entry_shapes": index["shapes"], "cache_codec": index["codec"]["spec"],
             "cache_rel_error": index["rel_error"],
             "cache_entry_bytes": index["entry_bytes"], "seconds": round(time.perf_counter() - t0, 3),
             "cache_mode": STORED, "computed_by": "host"}
    writer.manifest.update(schedule=schedule.to_json()["config"], subject_stage=stage, bundle_kind=SUBJECT_BUNDLE,
                           encode_tiling=tiling)
    return stage


def cache_batch_samples(view, x0: torch.Tensor, cond: dict[str, torch.Tensor]) -> int:
    """Samples per forward of the frozen full model while the host computes the cache: CACHE_BATCH_SAMPLES, fewer
    when one sample's streams (the tokens every block carries: image, and FLUX's text) exceed CACHE_BATCH_TOKENS / it."""
    with torch.no_grad():
        streams, _ = view.embed(view.pack(x0), torch.tensor([0.5]), cond)
    tokens = sum(int(v.shape[1]) for v in streams.values())
    return max(1, min(CACHE_BATCH_SAMPLES, CACHE_BATCH_TOKENS // tokens))


def resolve_plan(req: CompileRequest, spec: ModelSpec, num_blocks: int, transformer=None, vae=None,
                 photos=None) -> SkipPlan:
    if req.n_front is not None or req.n_back is not None:
        return SkipPlan(num_blocks, req.n_front or 0, req.n_back or 0, "explicit")
    from ditskip_edge.selection import select_plan   # block selection by cross-attention masking (PAPER.md section 3)
    return select_plan(spec, transformer, vae, photos, req.prompt, req.skip_ratio, seed=req.schedule.seed)


class ProgramStages:
    """The program stages of one compile, in `stages` order. With jobs 2 the ones that need no subject
    (`stage_worker.subject_independent`) start in a second process on entry, beside the subject stage; torch's
    threads are split between the two processes until `finish`. On an error the worker is stopped."""

    def __init__(self, writer: BundleWriter, stages: list, jobs: int = 1):
        self.writer, self.stages, self.jobs = writer, list(stages), jobs
        self.worker, self._threads = None, torch.get_num_threads()

    def __enter__(self) -> "ProgramStages":
        detached = [st for st in self.stages if subject_independent(st)] if self.jobs > 1 else []
        if detached:
            share = max(1, self._threads // 2)
            self.worker = StageWorker.start(self.writer, detached, threads=share)
            torch.set_num_threads(share)
        return self

    def finish(self) -> list[list[str]]:
        """The stages left to this process, then the worker's: each stage's program paths, in `stages` order."""
        detached = self.worker.stages if self.worker else []
        paths = {id(st): PROGRAM_STAGES[type(st)](self.writer, st) for st in self.stages
                 if all(st is not d for d in detached)}
        if self.worker is not None:
            worker, self.worker = self.worker, None
            try:
                paths.update(zip(map(id, detached), worker.join(self.writer)))
            finally:
                torch.set_num_threads(self._threads)
        return [paths[id(st)] for st in self.stages]

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.worker is not None:
            self.worker.cancel()
            torch.set_num_threads(self._threads)


def program_stages_before_the_model(writer: BundleWriter, spec: ModelSpec, req: CompileRequest,
                                    stages: list) -> ProgramStages:
    """What a subject-independent program stage reads (the manifest's model and LoRA records: the LoRA's rank and
    alpha, not the skip plan) is known before the model loads: written now, so that with --jobs 2 the worker starts
    now and its start-up runs beside the model load and the selection."""
    writer.manifest.update(model=spec.to_json(), lora=req.lora.to_json())
    return ProgramStages(writer, stages, req.jobs)


def compile_model_bundle_stage(writer: BundleWriter, spec: ModelSpec, transformer: nn.Module, vae: nn.Module,
                               prompts: list[str], schedule_cfg: ScheduleConfig, plan: SkipPlan, cache_codec: str,
                               min_photos: int) -> dict:
    """A model bundle's subject-independent part of the subject stage: every prompt's text conditioning (the prompt
    is not the private part), the schedule's parameters, the cache's codec and entry shapes. No photo."""
    records = []
    for i, prompt in enumerate(prompts):
        rel = f"{PROMPTS_DIR}/prompt_{i:03d}.safetensors"
        save_file({k: v.contiguous() for k, v in encode_prompt(spec, prompt).items()}, str(writer.path(rel)))
        records.append({"prompt": prompt, "text_conditioning": rel})
    view = make_view(spec.arch, transformer)
    cond = encode_prompt(spec, prompts[0])
    _, x0, _, _, streams, _ = forward_examples(view, LatentEncoder(spec.arch, vae).eval(), schedule_cfg.s_min_px, cond)
    shapes = entry_shapes(view, plan, x0, streams)
    codec = CacheCodec.parse(cache_codec)
    _, entry_bytes = entry_layout(codec, {k: tuple(v) for k, v in shapes.items()})
    stage = {"prompts": records, "cache_codec": codec.spec, "entry_shapes": shapes, "cache_entry_bytes": entry_bytes,
             "min_photos": min_photos, "num_samples": schedule_cfg.num_samples}
    writer.manifest.update(schedule=asdict(schedule_cfg), model_bundle=stage, bundle_kind=MODEL_BUNDLE)
    return stage


def compile_model_bundle(req: CompileRequest, spec: ModelSpec, sched: ScheduleConfig) -> dict:
    """No photos: the model bundle a phone personalizes itself (runtime/subject.py)."""
    num_blocks = int(spec.transformer_config["num_layers"]) + int(spec.transformer_config.get("num_single_layers", 0))
    if req.n_front is not None or req.n_back is not None:
        SkipPlan(num_blocks, req.n_front or 0, req.n_back or 0)
    if not any(isinstance(st, ExecutorchPrograms) for st in req.programs):
        raise UserError("a model bundle needs the ExecuTorch training program: add --runtime executorch (the subject "
                        "stage's programs are ExecuTorch programs)")
    subject_programs = req.subject_programs or SubjectPrograms(
        precision=next(st for st in req.programs if isinstance(st, ExecutorchPrograms)).precisions[0])
    writer = BundleWriter(req.out, overwrite=req.overwrite)
    prompts = [req.prompt, *req.more_prompts]
    stages = [dataclasses.replace(st, preprocess=False) if isinstance(st, ExecutorchPrograms) else st
              for st in req.programs]
    with writer:
        with program_stages_before_the_model(writer, spec, req, stages) as program_stages:
            transformer, vae = build_transformer(spec), build_vae(spec)
            plan = resolve_plan(req, spec, len(block_names_of(transformer)), transformer, vae, None)
            writer.manifest["created_by"] = f"ditskip-edge {__version__}"
            model_stage = compile_model_stage(writer, spec, transformer, plan, req.lora, req.optimizer)
            stage = compile_model_bundle_stage(writer, spec, transformer, vae, prompts, sched, plan, req.cache_codec,
                                               req.min_photos)
            subject = add_subject_programs(writer, subject_programs, transformer, vae,
                                           encode_prompt(spec, prompts[0]), req.encode_tile_px)
            del transformer, vae
            programs = program_stages.finish()
    return {"bundle": str(Path(req.out).resolve()), "bundle_kind": MODEL_BUNDLE, "model": spec.name,
            "plan": plan.to_json(), "kept_blocks": len(plan.kept), "prompts": prompts,
            "num_samples": stage["num_samples"], "kept_weight_bytes": model_stage["kept_weight_bytes"],
            "cache_codec": stage["cache_codec"], "cache_entry_bytes": stage["cache_entry_bytes"],
            "programs": [p for st in programs for p in st] + subject}


def check_prompts_fit(spec: ModelSpec, texts: list[tuple[str, str]]) -> None:
    """Refuse, in one line, a prompt or caption longer than the model's text encoder reads (its end would be cut
    silently; the device runtime refuses such a prompt too)."""
    from ditskip_edge.models.text import prompt_tokens
    for what, text in texts:
        counted = prompt_tokens(spec, text)
        if counted is not None and counted[0] > counted[1]:
            n, limit, unit = counted
            raise UserError(f"{what}: {text!r} has {n} {unit}; {spec.name}'s text encoder reads {limit}: shorten it")


def compile_bundle(req: CompileRequest) -> dict:
    spec = resolve_spec(req.model)
    if not spec.has_weights:
        raise UserError(f"model '{spec.name}' has no weights here: compile needs a built-in tiny model or a local "
                        f"diffusers folder")
    sched = check_request(req, spec)
    if req.images is None:
        return compile_model_bundle(req, spec, sched)
    photos = load_photos(req.images, sched.s_max_px, captions=req.photo_captions)
    captions = (read_captions([Path(req.images) / p.name for p in photos], MAX_PROMPT_CHARS) if req.photo_captions
                else None)
    check_prompts_fit(spec, [(f"{Path(p.name).stem}.txt", c) for p, c in zip(photos, captions or [])])
    check_photo_sizes(sched, [p.original_hw for p in photos], [p.name for p in photos])
    num_blocks = int(spec.transformer_config["num_layers"]) + int(spec.transformer_config.get("num_single_layers", 0))
    if req.n_front is not None or req.n_back is not None:
        SkipPlan(num_blocks, req.n_front or 0, req.n_back or 0)          # a bad split fails before the model loads
    writer = BundleWriter(req.out, overwrite=req.overwrite)
    with writer:
        with program_stages_before_the_model(writer, spec, req, req.programs) as program_stages:
            log.info("loading %s", spec.name)
            transformer = build_transformer(spec)
            vae = build_vae(spec)
            plan = resolve_plan(req, spec, len(block_names_of(transformer)), transformer, vae, photos)
            writer.manifest["created_by"] = f"ditskip-edge {__version__}"
            model_stage = compile_model_stage(writer, spec, transformer, plan, req.lora, req.optimizer)
            subject_stage = compile_subject_stage(writer, spec, transformer, vae, photos, req.prompt, sched, plan,
                                                  req.cache_codec, req.encode_tile_px, captions)
            del transformer, vae
            programs = program_stages.finish()
    return {"bundle": str(Path(req.out).resolve()), "model": spec.name, "plan": plan.to_json(),
            "kept_blocks": len(plan.kept), "num_samples": subject_stage["num_samples"],
            "clamped_crops": subject_stage["clamped_crops"], "kept_weight_bytes": model_stage["kept_weight_bytes"],
            "cache_codec": subject_stage["cache_codec"], "cache_entry_bytes": subject_stage["cache_entry_bytes"],
            **({"programs": [p for stage in programs for p in stage]} if programs else {})}
