"""The subject stage on the device: a model bundle + the user's photos -> a subject bundle, photos never leaving the
phone (issue 15). The runtime package alone (numpy, Pillow, ExecuTorch's inference bindings).

    photos --photos.py (read, check, short side -> s_max, Lanczos)--> pixels
           --schedule.py (the host's algorithm, portable)--> per sample: photo, t, crop box, noise seed
    per sample: patches.py crop -> encode program -> x0; rng.normal(noise seed) -> noise
           -> embed program -> block programs, one block at a time (forward.py) -> front / back residuals
           -> codecs.py (the bundle's codec) -> cache.py CacheWriter (resumable) -> subject/cache/

The subject bundle is written with BundleWriter (all or nothing): the model bundle's files hard-linked (copied where
linking fails), plus subject/photos/ (normalised PNGs), subject/schedule.json, subject/text_conditioning.safetensors
(the chosen prompt's, linked) and subject/cache/, with a manifest of the same form a host-compiled bundle has, so
the loop, the adapters, the apps and every reader train it unchanged. `cache_mode="x0-only"` writes a cache of each
sample's x0 alone (the encode program's output, a few percent of a stored entry) and `cache_mode="cache-free"` none:
each training step computes its sample's residuals (and, cache-free, its x0) first (runtime/inputs.py).

Interruptions: the bundle is assembled in a fixed working folder beside the output (`.<name>.partial`); its residual
cache is journalled entry by entry (cache.py), so a killed run, started again with the same model bundle, photos,
prompt and mode, continues after its last complete entry (nothing computed twice); other inputs are refused, and
--no-resume starts over. Bad input is one UserError line before any work, and leaves nothing behind: an unreadable
photo, too few photos, a subject bundle given for a model bundle, programs that are not the manifest's model's, a
data file that does not match its program.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import rng
from .bundle import (CACHE_DIR, CACHE_MODES, MODEL_BUNDLE, PHOTOS_DIR, SCHEDULE_FILE, STORED,
                     SUBJECT_BUNDLE, TEXT_FILE, X0_ONLY, Bundle, BundleWriter, cache_identity)
from .cache import CacheWriter
from .cache_format import X0, CacheCodec, entry_layout
from .codecs import decode_entry, encode_entry, relative_error
from .conditioning import SampleConditioning
from .contract import COND_PREFIX, CTX_PREFIX, STREAM_PREFIX, TRAIN_STEP, step_input_names
from .errors import BundleError, UserError
from .footprint import read_footprint
from .forward import ForwardPrograms, encode_tiling_of, subject_programs
from .photos import PhotoPixels, load_photos, read_png, save_png
from .progress import Progress
from .schedule import Schedule, ScheduleConfig, check_photo_sizes, make_schedule
from .tiling import tile_key, tile_shapes

CACHE_WARN_REL_ERROR = 0.05


@dataclass
class SubjectConfig:
    cache_mode: str = STORED              # "stored" | "x0-only" | "cache-free"
    prompt: str | None = None             # one of the model bundle's prompts (default: its first)
    resume: bool = True                   # continue an interrupted run's cache
    overwrite: bool = False               # replace --out if it exists
    keep_blocks: bool = False             # keep every block program loaded (default: one block at a time)
    stop_after: int | None = None         # stop (as if interrupted) after this many new cache entries: tests
    progress: bool = True

    def validate(self) -> None:
        if self.cache_mode not in CACHE_MODES:
            raise UserError(f"cache mode {self.cache_mode!r}: expected one of {', '.join(CACHE_MODES)}")


def work_dir_for(out: Path) -> Path:
    return out.parent / f".{out.name}.partial"


def open_model_bundle(path: str | Path) -> Bundle:
    b = Bundle.open(path)
    if b.kind != MODEL_BUNDLE:
        raise UserError(f"{b.root} is a subject bundle (it already has photos and a schedule): train it; the subject "
                        f"stage takes a model bundle (ditskip-edge compile without --images)")
    return b


def _shape_of(entry: dict, name: str, where: str) -> list[int]:
    for spec in entry["inputs"] + entry["outputs"]:
        if spec["name"] == name:
            return list(spec["shape"])
    raise BundleError(f"{where}: program {entry['path']} has no input or output {name!r}")


def check_programs(b: Bundle) -> None:
    """The programs are the manifest's model's: the encode program gives the cache's x0, the embed program the
    streams whose residuals the cache holds, every block program takes what the embed program gives, the training
    program takes this codec's entry. A program from another model (or another plan) is refused by name."""
    where = str(b.root / "manifest.json")
    encoders, emb, blocks = subject_programs(b)
    shapes = {k: list(v) for k, v in b.entry_shapes.items()}
    s_min = int(b.field("schedule", "s_min_px"))
    x0_shape = shapes[X0]
    rec = encode_tiling_of(b)
    if rec["tiled"] and set(encoders) != {tile_key(*hw) for hw in tile_shapes((s_min, s_min), int(rec["tile_px"]),
                                                                             int(rec["stride_px"]))}:
        raise BundleError(f"{where}: encode_tiling lists tiles {sorted(encoders)}, not those of {rec['tile_px']}-px "
                          f"tiles every {rec['stride_px']} px on the {s_min}-px crop")
    for key, chain in encoders.items():
        th, tw = (int(v) for v in key.split("x"))
        want_x0 = x0_shape[:2] + [th * x0_shape[2] // s_min, tw * x0_shape[3] // s_min]
        first, last = chain[0], chain[-1]
        if _shape_of(first, "patch", where)[2:] != [th, tw] or _shape_of(last, "x0", where) != want_x0 or \
                not rec["tiled"] and [th, tw] != [s_min, s_min]:
            raise BundleError(f"{where}: {first['path']} is not this model's encoder (patch/x0 shapes differ from "
                              f"the {key} px {'tile' if rec['tiled'] else 's_min crop'} and entry_shapes x0 "
                              f"{x0_shape})")
        for before, stage in zip(chain, chain[1:]):     # a staged encoder: each stage takes what the one before gives
            gives, takes = list(before["outputs"][0]["shape"]), list(stage["inputs"][0]["shape"])
            if gives != takes:
                raise BundleError(f"{where}: encoder stage {stage['path']} takes {takes}, {before['path']} gives "
                                  f"{gives}: the stages are not one encoder's")
    streams = {o["name"]: list(o["shape"]) for o in emb["outputs"]}
    for name, shape in shapes.items():
        if name.startswith("front.") and streams.get(STREAM_PREFIX + name[6:]) != shape or \
                name == "back.img" and streams.get(STREAM_PREFIX + "img") != shape:
            raise BundleError(f"{where}: {emb['path']} is not this model's (its streams {streams} do not give the "
                              f"residual {name} {shape})")
    for i, p in sorted(blocks.items()):
        ins = {s["name"]: list(s["shape"]) for s in p["inputs"]}
        if ins != {k: v for k, v in streams.items() if k.startswith((STREAM_PREFIX, CTX_PREFIX))}:
            raise BundleError(f"{where}: block program {p['path']} takes {ins}, not what {emb['path']} gives: it is "
                              f"another model's")
    cond = b.prompt_conditioning(0)
    want_cond = {COND_PREFIX + k: list(v.shape) for k, v in cond.items()}
    got_cond = {s["name"]: list(s["shape"]) for s in emb["inputs"] if s["name"].startswith(COND_PREFIX)}
    if want_cond != got_cond:
        raise BundleError(f"{where}: {emb['path']} takes text conditioning {got_cond}, the bundle's prompts give "
                          f"{want_cond}")
    codec = CacheCodec.parse(b.codec_spec)
    layout, _ = entry_layout(codec, {k: tuple(v) for k, v in shapes.items()})
    expect = step_input_names(cond, layout)
    for p in b.programs:
        if p.get("name") == TRAIN_STEP and [s["name"] for s in p["inputs"]] != expect:
            raise BundleError(f"{where}: training program {p['path']} takes {[s['name'] for s in p['inputs']][:6]}.., "
                              f"not this codec's entry {expect[:6]}..")


def run_identity(model: Bundle, photos: list[PhotoPixels], prompt: str, mode: str) -> str:
    text = json.dumps({"model_bundle": model.manifest_sha256, "photos": [[p.name, p.sha256] for p in photos],
                       "prompt": prompt, "cache_mode": mode}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def subject_manifest(model: Bundle) -> dict:
    """The model bundle's manifest fields a subject bundle keeps (files are listed again on commit)."""
    keep = ("created_by", "model", "plan", "lora", "optimizer", "model_stage", "lora_file", "schedule", "programs",
            "generation", "encode_tiling")
    return {k: model.manifest[k] for k in keep if k in model.manifest}


def personalize(model_dir: str | Path, photos_dir: str | Path, out_dir: str | Path, cfg: SubjectConfig) -> dict:
    """The subject stage: a model bundle and a folder of photos -> a subject bundle at out_dir. Returns a summary."""
    cfg.validate()
    t_start = time.perf_counter()
    model = open_model_bundle(model_dir)
    check_programs(model)
    prompts = model.prompts()
    prompt = cfg.prompt if cfg.prompt is not None else prompts[0]
    if prompt not in prompts:
        raise UserError(f"prompt {prompt!r} is not one of the model bundle's prompts {prompts} (the text encoder "
                        f"stays on the host: compile the model bundle with it)")
    sched_cfg = ScheduleConfig(**model.field("schedule"))
    photos = load_photos(photos_dir, sched_cfg.s_max_px, int(model.field("model_bundle", "min_photos")))
    check_photo_sizes(sched_cfg, [p.original_hw for p in photos], [p.name for p in photos])
    schedule = make_schedule(sched_cfg, [p.hw for p in photos], [p.name for p in photos])
    out = Path(out_dir)
    work = work_dir_for(out)
    if out.exists() and not cfg.overwrite:
        raise UserError(f"{out} already exists: choose another --out or pass --force")
    fwd = ForwardPrograms(model, keep_blocks=cfg.keep_blocks)
    fwd.check_loads()                     # a program or data file ExecuTorch cannot load: refused before any work
    identity = run_identity(model, photos, prompt, cfg.cache_mode)
    check_partial(work, identity, cfg.resume)
    p_index = prompts.index(prompt)
    prompt_rel = model.field("model_bundle", "prompts")[p_index]["text_conditioning"]
    summary = {"model_bundle": str(model.root.resolve()), "bundle": str(out.resolve()), "cache_mode": cfg.cache_mode,
               "prompt": prompt, "photos": len(photos), "num_samples": schedule.num_samples}
    footprint_start = read_footprint()
    try:
        stage = _write_subject_bundle(model, photos, schedule, prompt, prompt_rel, fwd, identity, cfg, out, work,
                                      summary)
    except _Interrupted:
        return {**summary, "interrupted_at_entry": summary.get("entries_done"), "work_dir": str(work)}
    summary.update(seconds=round(time.perf_counter() - t_start, 3),
                   seconds_per_sample=stage.get("seconds_per_sample"), cache_entry_bytes=stage["cache_entry_bytes"],
                   resumed_entries=stage.get("resumed_entries", 0), computed_entries=stage.get("computed_entries", 0))
    if footprint_start is not None and "peak_anon_bytes" in stage:
        summary["footprint"] = {"what": "RssAnon (dirty anonymous: what a phone counts) and RssFile, bytes, of this "
                                        "process: at the start of the stage (model bundle open and checked, nothing "
                                        "computed) and the peak after each sample",
                                "at_start_anon_bytes": footprint_start.anon_bytes,
                                "peak_anon_bytes": stage["peak_anon_bytes"], "peak_file_bytes": stage["peak_file_bytes"]}
    return summary


def check_partial(work: Path, identity: str, resume: bool) -> None:
    """An interrupted run's working folder: continued when it was made from the same inputs (its cache journal's
    run identity), refused with one line otherwise; removed with resume=False or when it holds no cache journal."""
    from .cache import JOURNAL
    if not work.exists():
        return
    journal = work / CACHE_DIR / JOURNAL
    header = None
    if resume and journal.is_file():
        try:
            header = json.loads(journal.read_text().split("\n", 1)[0])["header"]
        except (ValueError, KeyError, TypeError):
            header = None
    if header is not None and header.get("run") != identity:
        raise UserError(f"{work}: an interrupted subject stage for other inputs (another model bundle, other photos, "
                        f"prompt or mode): delete it or pass --no-resume")
    if header is None:
        shutil.rmtree(work)


def _write_subject_bundle(model: Bundle, photos, schedule, prompt, prompt_rel, fwd, identity, cfg, out, work,
                          summary) -> dict:
    t0 = time.perf_counter()
    with BundleWriter(out, overwrite=cfg.overwrite, work_dir=work) as w:
        w.manifest.update(subject_manifest(model))
        for rel, info in model.field("files").items():
            w.link(model.root / rel, rel, info)
        for i, p in enumerate(photos):
            save_png(p.pixels, w.path(f"{PHOTOS_DIR}/{i:03d}.png"))
        schedule.save(w.path(SCHEDULE_FILE))
        w.link(model.root / prompt_rel, TEXT_FILE, model.field("files")[prompt_rel])
        stage = {"schedule": SCHEDULE_FILE, "text_conditioning": TEXT_FILE,
                 "photos": [f"{PHOTOS_DIR}/{i:03d}.png" for i in range(len(photos))], "prompt": prompt,
                 "num_samples": schedule.num_samples, "clamped_crops": schedule.clamped_samples,
                 "entry_shapes": {k: list(v) for k, v in model.entry_shapes.items()},
                 "cache_codec": model.codec_spec, "cache_mode": cfg.cache_mode, "computed_by": "device",
                 "model_bundle_sha256": model.manifest_sha256, "run_identity": identity}
        w.manifest.update(bundle_kind=SUBJECT_BUNDLE)
        if cfg.cache_mode in (STORED, X0_ONLY):
            done = write_cache(w, model, photos, schedule, fwd, identity, cfg, summary)
            if done is None:                    # stopped as if interrupted: the working folder stays
                raise _Interrupted()
            stage.update(done)
        else:
            stage.update(cache=None, cache_entry_bytes=entry_layout(CacheCodec.parse(model.codec_spec),
                                                                    model.entry_shapes)[1])
        stage["seconds"] = round(time.perf_counter() - t0, 3)
        w.manifest["subject_stage"] = {k: v for k, v in stage.items()
                                       if k not in ("peak_anon_bytes", "peak_file_bytes")}
    return stage


class _Interrupted(KeyboardInterrupt):
    """SubjectConfig.stop_after: leave the working folder as a killed run would."""


def write_cache(w: BundleWriter, model: Bundle, photos: list[PhotoPixels], schedule: Schedule,
                fwd: ForwardPrograms, identity: str, cfg: SubjectConfig, summary: dict) -> dict | None:
    """The cache (x0 and the residuals; x0 alone in x0-only mode), entry by entry, resumable. Returns the
    subject_stage fields it adds (None: stopped)."""
    codec = CacheCodec.parse(model.codec_spec)
    ident = cache_identity(model.field("model"), model.field("plan"), schedule)
    writer = CacheWriter(w.path(CACHE_DIR + "/x").parent, ident, codec, resumable=True, run=identity)
    with_residuals = cfg.cache_mode == STORED
    shapes = model.entry_shapes if with_residuals else {X0: model.entry_shapes[X0]}
    writer.set_shapes(shapes)                           # continues the journal of an interrupted run, if any
    start = writer.next_index
    cond = {COND_PREFIX + k: v for k, v in model.prompt_conditioning(model.prompts().index(summary["prompt"])).items()}
    bar = Progress("subject stage (residual cache)" if with_residuals else "subject stage (x0 cache)",
                   schedule.num_samples, start, cfg.progress)
    t0, peak_anon, peak_file, new = time.perf_counter(), 0, 0, 0
    for s in schedule.samples[start:]:
        x0 = fwd.x0(photos[s.photo].pixels, s.crop_box)
        if not with_residuals:
            writer.add(s.index, encode_entry(codec, {X0: x0}), {})
        else:
            noise = rng.normal(s.noise_seed, tuple(x0.shape))
            residuals = fwd.residuals(x0, noise, np.array([s.t], np.float32), cond)
            parts = encode_entry(codec, {X0: x0, **residuals})
            decoded = decode_entry(codec, parts, {k: tuple(v.shape) for k, v in residuals.items()})
            writer.add(s.index, parts, {"rel_error": {k: relative_error(decoded[k], residuals[k]) for k in residuals}})
        new += 1
        bar.update()
        fp = read_footprint()
        if fp is not None:
            peak_anon, peak_file = max(peak_anon, fp.anon_bytes), max(peak_file, fp.file_bytes)
        if cfg.stop_after is not None and new >= cfg.stop_after and writer.next_index < schedule.num_samples:
            writer.close()
            bar.close()
            summary["entries_done"] = writer.next_index
            return None
    bar.close()
    seconds = time.perf_counter() - t0
    errors: dict[str, list[float]] = {}
    for extra in writer.extras:
        for k, v in extra.get("rel_error", {}).items():
            errors.setdefault(k, []).append(v)
    rel = {k: {"mean": sum(v) / len(v), "max": max(v)} for k, v in errors.items()}
    index = writer.finish({"rel_error": rel})
    for name, err in rel.items():
        if err["max"] > CACHE_WARN_REL_ERROR:
            import logging
            logging.getLogger(__name__).warning("residual cache codec %s: %s has relative error up to %.1f%%",
                                                codec.spec, name, 100 * err["max"])
    return {"cache": CACHE_DIR, "cache_rel_error": rel, "cache_entry_bytes": index["entry_bytes"],
            "resumed_entries": start, "computed_entries": new,
            "seconds_per_sample": round(seconds / max(new, 1), 4),
            **({"peak_anon_bytes": peak_anon, "peak_file_bytes": peak_file} if peak_anon else {})}


class CacheFreeEntries:
    """x0-only and cache-free modes: sample -> its encoded cache entry, computed now (x0 read from the x0-only cache,
    or from the photo by the encode program; residuals by the skipped blocks' forward programs; coded with the
    bundle's codec in memory), what a stored cache's `read_encoded` would give. StepInputs uses it for a bundle whose
    cache_mode is not "stored"."""

    def __init__(self, bundle: Bundle, keep_blocks: bool | None = None):
        self.bundle = bundle
        # one block program at a time unless asked: kept programs hold every block's arena at once (forward.py)
        self.fwd = ForwardPrograms(bundle, keep_blocks=bool(keep_blocks))
        self.codec = CacheCodec.parse(bundle.codec_spec)
        self.cond = SampleConditioning(bundle)
        self.photos: dict[int, np.ndarray] = {}
        self.x0_cache = bundle.cache() if bundle.cache_mode == X0_ONLY else None
        if self.x0_cache is not None and set(self.x0_cache.shapes) != {X0}:
            raise BundleError(f"{bundle.root}: an x0-only bundle whose cache holds {sorted(self.x0_cache.shapes)}, "
                              f"not x0 alone")

    def photo(self, index: int) -> np.ndarray:
        if index not in self.photos:
            self.photos[index] = read_png(self.bundle.root / self.bundle.field("subject_stage", "photos")[index])
        return self.photos[index]

    def __call__(self, sample) -> dict[str, np.ndarray]:
        if self.x0_cache is not None:
            x0 = self.x0_cache.read_encoded(sample.index)[X0]
        else:
            x0 = self.fwd.x0(self.photo(sample.photo), sample.crop_box)
        noise = rng.normal(sample.noise_seed, tuple(x0.shape))
        residuals = self.fwd.residuals(x0, noise, np.array([sample.t], np.float32), self.cond(sample))
        return encode_entry(self.codec, {X0: x0, **residuals})
