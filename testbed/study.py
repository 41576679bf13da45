"""The personalization study on the planted-subject instrument (instrument.py): every held-out subject x training
seed x method -> LoRA -> how far it moves the model towards the teacher.

    for subject in SUBJECTS:       teacher = the base + a planted LoRA trained long on the references (kept by key)
      for train_seed in seeds:     one unit = (subject, train seed)
        selection                  30% / 50% splits with the base probe and the tuned probe (ditskip_edge.selection)
        for method in METHODS:     plan -> compile_bundle -> TRAINERS[runtime] -> LoRA file -> the full diffusers
                                   model (load_lora_adapter) -> velocity / sample progress and closure (paired
                                   samples), subject similarity to the references, background as prompted
    -> per method: mean +- 95% CI over units; the paper's orderings as paired differences over units; the ratio
       BlockSkip 50% / full LoRA with a paired bootstrap CI

Methods (PAPER.md) name a plan, resolved per unit:
    "none" (full LoRA, 0/0); "sel30" / "sel50" (selection by cross-attention masking with the study's probe, or
    "sel50:base" / "sel50:tuned" for a given probe); "paper30" / "paper50" (the paper's FLUX splits scaled to 12
    blocks); "first50" / "last50" (the ablations); "f<n>-<m>" (a fixed split: n front / m back). Rows with the same
    plan, data, codec and trainer on a unit are one training (the later row reuses it and says so).

Cache codec and trainer per method:
- `Method.codec`: a key of `CODECS` (name -> the `compile --cache-codec` spec): "fp32" (uncompressed) or "default"
  (the compiler's default compressed codec).
- `Method.runtime`: a key of `TRAINERS`: "eager" (the reference trainer), "executorch" (the bundle also gets an
  ExecuTorch training program and the runtime package trains it (ditskip_edge.runtime.run.train_bundle)) or
  "ort" (fp32 ONNX Runtime Training artifacts, the same runtime loop).
- `Method.program`: a device row's program, a key of `DEVICE_PROGRAMS`: "fp32" (portable kernels), "int8" (compile's
  int8 XNNPACK program) or "int8_qd8" (the same with `--integer-matmuls qd8`).
  A runtime row's LoRA is compared tensor by tensor with the eager row of the same plan and codec.
"""

from __future__ import annotations

import json
import platform
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ditskip_edge.cache import DEFAULT_CODEC
from compiler.compile import CompileRequest, compile_bundle
from ditskip_edge.generate import grid, load_model
from ditskip_edge.images import to_uint8_image
from ditskip_edge.lora import LoraSpec
from ditskip_edge.models.loading import build_transformer, builtin_weights_path, resolve_spec
from ditskip_edge.runtime.bundle import CACHE_DIR, OptimizerSpec, sha256_file
from ditskip_edge.runtime.schedule import ScheduleConfig
from export.executorch_stage import ExecutorchPrograms
from export.ort_stage import OrtPrograms

from . import instrument as ins
from .metrics import SubjectEmbedder, background_match, mean_ci, subject_similarity
from .scenes import SUBJECTS, subject_prompt, write_reference_photos

MODEL = "flux-testbed"
PRIMARY = "velocity_progress"         # the instrument's main measure (instrument_pilot.md); the others beside it


@dataclass(frozen=True)
class Method:
    name: str
    plan: str                        # "none" | "sel30" | "sel50" | "sel30:<probe>" | "sel50:<probe>" | "paper30" |
                                     # "paper50" | "first50" | "last50" | "f<n>-<m>" (n front / m back)
    dynamic_patches: bool = True
    zero_residuals: bool = False     # ablation: skip the spans but add nothing in their place
    codec: str = "fp32"              # residual-cache codec: a key of CODECS
    runtime: str = "eager"           # trainer: a key of TRAINERS
    program: str = "fp32"            # a device row's program: a key of DEVICE_PROGRAMS
    note: str = ""


METHODS: dict[str, Method] = {m.name: m for m in [
    Method("full_lora", "none", note="LoRA on all blocks"),
    Method("blockskip_30", "sel30", note="split by selection (the study's probe)"),
    Method("blockskip_50", "sel50", note="split by selection (the study's probe)"),
    Method("blockskip_30_base_probe", "sel30:base", note="split by selection probing the base model"),
    Method("blockskip_50_base_probe", "sel50:base", note="split by selection probing the base model"),
    Method("blockskip_30_tuned_probe", "sel30:tuned", note="split by selection probing a short-LoRA-tuned model"),
    Method("blockskip_50_tuned_probe", "sel50:tuned", note="split by selection probing a short-LoRA-tuned model"),
    Method("blockskip_50_default_codec", "sel50", codec="default", note="compressed residual cache"),
    Method("blockskip_50_executorch", "sel50", runtime="executorch", note="ExecuTorch runtime trainer (fp32)"),
    Method("blockskip_50_ort", "sel50", runtime="ort", note="ONNX Runtime Training trainer (fp32, ORT's AdamW)"),
    Method("blockskip_50_executorch_int8", "sel50", runtime="executorch", program="int8",
           note="ExecuTorch trainer, compile's int8 XNNPACK program (int8 codes, fp32 matmuls)"),
    Method("blockskip_50_executorch_qd8", "sel50", runtime="executorch", program="int8_qd8",
           note="ExecuTorch trainer, int8 XNNPACK program with compile --integer-matmuls qd8"),
    Method("paper_split_30", "paper30", note="the paper's FLUX 30% split (7/10 of 57) scaled, not selected"),
    Method("paper_split_50", "paper50", note="the paper's FLUX 50% split (19/10 of 57) scaled, not selected"),
    Method("no_residual_50", "sel50", zero_residuals=True, note="ablation: residuals zeroed"),
    Method("skip_first_50", "first50", note="ablation: front span only"),
    Method("skip_last_50", "last50", note="ablation: back span only"),
    Method("split_5_1", "f5-1", note="a fixed 5 front / 1 back split: where the base probe picked it, BlockSkip 50% "
                                     "matched full LoRA (post hoc)"),
    Method("fixed_resize_50", "sel50", dynamic_patches=False, note="ablation: whole photo resized, no crops"),
]}


def _split(k: int, front_share: float) -> tuple[int, int]:
    n = int(round(k * front_share))
    return n, k - n


def paper_plans(num_blocks: int) -> dict[str, tuple[int, int]]:
    """The paper's FLUX splits (30%: 7 front / 10 back; 50%: 19 / 10 of 57 blocks) scaled to `num_blocks`."""
    k30, k50 = int(round(0.3 * num_blocks)), int(round(0.5 * num_blocks))
    return {"30": _split(k30, 7 / 17), "50": _split(k50, 19 / 29)}


def selected_plans(subject_dir: Path, prompt: str, seed: int, probe: str,
                   tune_steps: int | None = None, num_seeds: int | None = None,
                   model: str = MODEL) -> dict[str, dict]:
    """30% / 50% splits chosen by cross-attention masking (ditskip_edge.selection, the verb `compile --skip-ratio`
    uses) with the base or the tuned probe: {"30": {"plan": [n, m], "splits": [...], "stability": {...}, "seconds": s},
    "50": ...}."""
    from ditskip_edge.images import load_photos
    from ditskip_edge.models.loading import build_vae
    from ditskip_edge.plan import skip_budget
    from ditskip_edge.selection import SelectionConfig, make_probe, select_splits
    spec = resolve_spec(model)
    transformer, vae = build_transformer(spec), build_vae(spec)
    num_blocks = spec.transformer_config["num_layers"] + spec.transformer_config["num_single_layers"]
    cfg = SelectionConfig(probe=probe, **({} if tune_steps is None else {"tune_steps": tune_steps}),
                          **({} if num_seeds is None else {"num_seeds": num_seeds}))
    t0 = time.perf_counter()
    p = make_probe(spec, transformer, vae, load_photos(subject_dir, spec.data_px), prompt, seed, cfg)
    ratios = {"30": 0.3, "50": 0.5}
    results = select_splits(p, [skip_budget(num_blocks, r) for r in ratios.values()], list(ratios.values()))
    secs = round(time.perf_counter() - t0, 1)
    return {key: {"plan": list(r["chosen"]), "splits": r["splits"], "stability": r["stability"], "seconds": secs}
            for key, r in zip(ratios, results)}


# ------------------------------------------------------------------------------------------ codecs, trainers
CODECS: dict[str, str] = {"fp32": "fp32", "default": DEFAULT_CODEC}        # Method.codec -> compile --cache-codec
TRAINERS: dict[str, Callable[[Path, Path, str], Path]] = {}      # Method.runtime -> (bundle, run, precision) -> LoRA
# Method.program -> (precision of the frozen weights, ExecutorchPrograms options); ORT rows take fp32 only
DEVICE_PROGRAMS: dict[str, tuple[str, dict]] = {
    "fp32": ("fp32", {}),                                                   # portable kernels, remat blocks
    "int8": ("int8", {"backend": "xnnpack"}),
    "int8_qd8": ("int8", {"backend": "xnnpack", "integer_matmuls": "qd8"}),
}


def train_eager_lora(bundle_dir: Path, run_dir: Path, zero_residuals: bool = False) -> Path:
    """The eager reference trainer under the runtime's loop; with zero_residuals every residual is replaced by zeros
    (the decoder `ZeroResiduals`: the skipped spans are skipped and nothing stands in for them)."""
    from ditskip_edge.cache.codecs import ZeroResiduals
    from ditskip_edge.cache.store import reader_decoder
    from ditskip_edge.eager import EagerStep
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.loop import RunConfig, train
    bundle = Bundle.open(bundle_dir)
    decoder = ZeroResiduals(reader_decoder(bundle.cache())) if zero_residuals else None
    cfg = RunConfig(run_dir=run_dir, resume=False, progress=False)
    return Path(train(bundle, EagerStep(bundle, decoder), cfg)["lora"])


def train_device_lora(runtime: str, bundle_dir: Path, run_dir: Path, precision: str) -> Path:
    """A device runtime's trainer (the runtime package alone), on the bundle's program of `precision`."""
    from ditskip_edge.runtime.loop import RunConfig
    from ditskip_edge.runtime.run import train_bundle
    cfg = RunConfig(run_dir=run_dir, resume=False, progress=False)
    return Path(train_bundle(bundle_dir, runtime, cfg, precision=precision)["lora"])


TRAINERS["eager"] = lambda bundle, run, precision: train_eager_lora(bundle, run)
TRAINERS["executorch"] = lambda bundle, run, precision: train_device_lora("executorch", bundle, run, precision)
TRAINERS["ort"] = lambda bundle, run, precision: train_device_lora("ort", bundle, run, precision)


def lora_difference(a: Path, b: Path) -> dict:
    """max |a - b| / max |a| over the LoRA tensors of two files with the same keys (eager vs runtime-trained)."""
    from safetensors.torch import load_file
    sa, sb = load_file(str(a)), load_file(str(b))
    if set(sa) != set(sb):
        raise ValueError(f"LoRA files differ in keys: {sorted(set(sa) ^ set(sb))[:4]}")
    num = max(float((sa[k] - sb[k]).abs().max()) for k in sa)
    den = max(float(sa[k].abs().max()) for k in sa)
    return {"max_abs_diff": num, "max_rel_diff": num / max(den, 1e-30), "tensors": len(sa)}


# ---------------------------------------------------------------------------------------------------- study
@dataclass
class StudyConfig:
    out: Path
    subjects: list[str] = field(default_factory=lambda: list(SUBJECTS))
    methods: list[str] | None = None         # None: all
    train_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])    # units = subjects x train seeds
    steps: int = 400
    grad_accum: int = 4
    rank: int = 8
    lora_targets: list[str] = field(default_factory=list)    # module suffixes in a block; [] = the arch default
    lr: float = 5e-3
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])          # sample noise seeds (paired samples)
    prompts: int | None = None               # None: every eval prompt
    photos_per_prompt: int = 2               # fresh photos per eval prompt (velocity inputs)
    sample_steps: int = 20
    guidance: float = 3.0
    n_references: int = 5
    teacher: ins.TeacherConfig = field(default_factory=ins.TeacherConfig)
    teacher_dir: Path | None = None          # None: out / "teachers" (kept between runs, keyed)
    model: str = MODEL                       # flux-testbed, or a .safetensors file of its weights (not in the config
                                             # key: the weights' SHA-256 is)
    probe: str | None = None                 # the probe of the blockskip_30 / _50 rows; None: SelectionConfig's
    tune_steps: int | None = None            # tuned probe's LoRA steps; None: SelectionConfig's
    keep_bundles: bool = False
    fixed_plans: bool = False                # True: the paper's splits scaled in place of every selection
    jobs: int = 1                            # units studied in parallel worker processes (1 torch thread each)

    def default_probe(self) -> str:
        from ditskip_edge.selection import SelectionConfig
        return self.probe or SelectionConfig().probe


def personalize(subject_dir: Path, prompt: str, work: Path, method: Method, plan: tuple[int, int], seed: int,
                cfg: StudyConfig) -> tuple[Path, dict]:
    """compile_bundle + the method's trainer -> the LoRA file and what it cost."""
    spec = resolve_spec(cfg.model)
    if method.codec not in CODECS:
        raise ValueError(f"cache codec {method.codec!r}: expected one of {list(CODECS)}")
    if method.runtime not in TRAINERS:
        raise ValueError(f"runtime {method.runtime!r}: expected one of {list(TRAINERS)}")
    if method.program not in DEVICE_PROGRAMS or (method.runtime == "ort" and method.program != "fp32"):
        raise ValueError(f"program {method.program!r} for runtime {method.runtime!r}: expected one of "
                         f"{list(DEVICE_PROGRAMS) if method.runtime == 'executorch' else ['fp32']}")
    precision, executorch_options = DEVICE_PROGRAMS[method.program]
    sched = ScheduleConfig(steps=cfg.steps, grad_accum=cfg.grad_accum, s_min_px=spec.train_px,
                           s_max_px=spec.data_px, multiple_px=spec.pixel_multiple, seed=seed,
                           dynamic_patches=method.dynamic_patches)
    bundle = work / "bundle"
    programs = {"eager": [], "executorch": [ExecutorchPrograms((precision,), preprocess=False, **executorch_options)],
                "ort": [OrtPrograms((precision,))]}[method.runtime]
    t0 = time.perf_counter()
    summary = compile_bundle(CompileRequest(model=cfg.model, images=str(subject_dir), prompt=prompt,
                                            out=str(bundle), n_front=plan[0], n_back=plan[1],
                                            schedule=sched, lora=LoraSpec(rank=cfg.rank, alpha=float(cfg.rank),
                                                          targets=list(cfg.lora_targets)),
                                            optimizer=OptimizerSpec(lr=cfg.lr), overwrite=True,
                                            cache_codec=CODECS[method.codec], programs=programs))
    t1 = time.perf_counter()
    if method.zero_residuals:
        lora = train_eager_lora(bundle, work / "run", zero_residuals=True)
    else:
        lora = TRAINERS[method.runtime](bundle, work / "run", precision)
    t2 = time.perf_counter()
    return lora, {"compile_s": round(t1 - t0, 2), "train_s": round(t2 - t1, 2), "cache_codec": CODECS[method.codec],
                  "cache_bytes": _cache_bytes(bundle), "runtime": method.runtime, "program": method.program,
                  "kept_blocks": summary["kept_blocks"], "kept_weight_bytes": summary["kept_weight_bytes"]}


def _cache_bytes(bundle: Path) -> int:
    """Bytes of the residual cache as stored in the bundle (shards + index)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    return int(sum(f["bytes"] for name, f in manifest["files"].items() if name.startswith(CACHE_DIR + "/")))


def _config_key(cfg: StudyConfig) -> dict:
    spec = resolve_spec(cfg.model)
    d = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()
         if k not in ("subjects", "jobs", "train_seeds", "out", "teacher_dir", "model")}
    return {"model_sha256": sha256_file(builtin_weights_path(spec)), "default_probe": cfg.default_probe(), **d}


def teacher_for(sname: str, cfg: StudyConfig) -> Path:
    folder = Path(cfg.teacher_dir) if cfg.teacher_dir else Path(cfg.out) / "teachers"
    return ins.train_teacher(resolve_spec(cfg.model), SUBJECTS[sname], cfg.n_references, cfg.teacher, folder)


def _resolve_plan(plan: str, default_probe: str, selections: dict, num_blocks: int) -> tuple[int, int]:
    half = num_blocks // 2
    fixed = {"none": (0, 0), "first50": (half, 0), "last50": (0, half),
             "paper30": paper_plans(num_blocks)["30"], "paper50": paper_plans(num_blocks)["50"]}
    if plan in fixed:
        return tuple(fixed[plan])
    split = re.fullmatch(r"f(\d+)-(\d+)", plan)
    if split:
        return int(split[1]), int(split[2])
    ratio, _, probe = plan.removeprefix("sel").partition(":")
    return tuple(selections[probe or default_probe][ratio]["plan"])


def study_unit(sname: str, train_seed: int, cfg: StudyConfig) -> dict:
    """One (subject, train seed): every method's closures and scores. Saved as work/<subject>_s<seed>/unit.json; a
    rerun with the same config and model weights reuses it (nothing lost when a later unit fails)."""
    spec = resolve_spec(cfg.model)
    num_blocks = spec.transformer_config["num_layers"] + spec.transformer_config["num_single_layers"]
    names = cfg.methods or list(METHODS)
    work = Path(cfg.out) / "work" / f"{sname}_s{train_seed}"
    saved = work / "unit.json"
    key = json.dumps(_config_key(cfg), sort_keys=True)
    if saved.is_file() and json.loads(saved.read_text()).get("config_key") == key:
        return json.loads(saved.read_text())
    subject = SUBJECTS[sname]
    sdir = work / "photos"
    refs = write_reference_photos(subject, sdir, cfg.n_references)
    prompt = subject_prompt(subject)

    # the two ends of the scale
    teacher = ins.load_weights(spec, teacher_for(sname, cfg))
    base = build_transformer(spec).eval()
    held = ins.held_out(spec, subject, cfg.photos_per_prompt, cfg.seeds, prompts=cfg.prompts)
    anchors = ins.anchors(spec, base, teacher, held, cfg.sample_steps, cfg.guidance)
    del teacher, base

    # the splits
    default_probe = cfg.default_probe()
    probes = sorted({m.plan.partition(":")[2] or default_probe for m in (METHODS[n] for n in names)
                     if m.plan.startswith("sel")})
    if cfg.fixed_plans:
        pp = paper_plans(num_blocks)
        selections = {p: {r: {"plan": list(pp[r]), "splits": [], "seconds": 0.0} for r in ("30", "50")}
                      for p in probes}
    else:
        selections = {p: selected_plans(sdir, prompt, train_seed, p, cfg.tune_steps, model=cfg.model)
                      for p in probes}

    emb = SubjectEmbedder()
    rows: dict[str, dict] = {}
    images: dict[str, torch.Tensor] = {"fresh photos": _fresh_grid_row(subject, held, spec.train_px),
                                       "base (no LoRA)": anchors.x_base, "teacher": anchors.x_teacher}
    done: dict[tuple, str] = {}            # training identity -> the first row that trained it
    loras: dict[tuple, Path] = {}
    for name in names:
        m = METHODS[name]
        plan = _resolve_plan(m.plan, default_probe, selections, num_blocks)
        ident = (plan, m.dynamic_patches, m.zero_residuals, m.codec, m.runtime, m.program)
        if ident in done:
            rows[name] = {**rows[done[ident]], "plan": list(plan), "same_training_as": done[ident]}
            images[name] = images[done[ident]]
            continue
        lora, info = personalize(sdir, prompt, work / name, m, plan, train_seed, cfg)
        model = load_model(spec, lora)
        scores, x = ins.closures(spec, model, held, anchors, cfg.sample_steps, cfg.guidance)
        rows[name] = {**scores, **_image_scores(x, held, refs, emb), "plan": list(plan), **info}
        twin = (plan, m.dynamic_patches, m.zero_residuals, m.codec, "eager", "fp32")
        if m.runtime != "eager" and twin in loras:
            rows[name]["lora_vs_eager"] = {"eager_method": done[twin], **lora_difference(loras[twin], lora)}
        images[name] = x
        done[ident], loras[ident] = name, lora
        if not cfg.keep_bundles:
            _rm_tree(work / name / "bundle")
    anchor_rows = {"base (no LoRA)": {**{m: 0.0 for m in ins.ANCHORED},
                                      **_image_scores(anchors.x_base, held, refs, emb)},
                   "teacher": {**{m: 1.0 for m in ins.ANCHORED},
                               **_image_scores(anchors.x_teacher, held, refs, emb)},
                   "fresh photos": _image_scores(images["fresh photos"], held, refs, emb)}
    if train_seed == min(cfg.train_seeds):
        _save_grid(Path(cfg.out) / f"fidelity_{sname}.png", refs, images, cols=len(held.gen_prompts))
    result = {"config_key": key, "subject": sname, "train_seed": train_seed, "rows": {**anchor_rows, **rows},
              "selections": selections, "methods": {n: asdict(METHODS[n]) for n in names},
              "prompts": {"train": prompt, "eval": held.prompts},
              "distances": {"velocity_base_teacher_mse": float(((anchors.v_base - anchors.v_teacher) ** 2).mean()),
                            "sample_base_teacher_mse": float(((anchors.x_base - anchors.x_teacher) ** 2).mean())}}
    saved.write_text(json.dumps(result, indent=1))
    return json.loads(saved.read_text())          # the same form a reuse returns


def _fresh_grid_row(subject, held: ins.HeldOut, px: int) -> torch.Tensor:
    """Fresh photos laid out like the paired samples (one per prompt x sample seed)."""
    n = len(held.gen_prompts) // len(held.prompts)
    return torch.cat([ins.fresh_photos(subject, bg, n, px) for bg in held.backgrounds])


def _image_scores(x: torch.Tensor, held: ins.HeldOut, refs, emb) -> dict:
    return {"subject_sim": float(np.mean([subject_similarity(im, refs, emb) for im in x])),
            "background_ok": float(np.mean([background_match(im, bg) for im, bg in zip(x, held.gen_backgrounds)]))}


def _unit_in_worker(args: tuple[str, int, StudyConfig]) -> dict:
    torch.set_num_threads(1)           # one thread per worker: 2 threads per process on 2 shared cores spin
    return study_unit(*args)


def _teacher_in_worker(args: tuple[str, StudyConfig]) -> str:
    torch.set_num_threads(1)
    return str(teacher_for(*args))


def check_names(cfg: StudyConfig) -> None:
    """Unknown subjects or methods, or a model that is not one: one clear ValueError before any work (not a
    KeyError mid-study)."""
    from ditskip_edge.runtime.errors import UserError
    try:
        resolve_spec(cfg.model)
    except UserError as e:
        raise ValueError(f"--model: {e}") from None
    for kind, asked, have in [("subject", cfg.subjects, list(SUBJECTS)), ("method", cfg.methods or [], list(METHODS))]:
        bad = [n for n in asked if n not in have]
        if bad:
            raise ValueError(f"unknown {kind}(s) {', '.join(bad)}: expected some of {', '.join(have)}")


def run_study(cfg: StudyConfig, command: str = "", on_unit: Callable[[dict], None] | None = None) -> dict:
    """Teachers (one per subject), then every unit (in cfg.jobs worker processes when > 1) -> table, orderings.
    `on_unit` gets the study so far after each finished unit (to write partial results)."""
    t_start = time.perf_counter()
    check_names(cfg)
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    # seed-major: a study stopped early still has every subject (units finish in about this order)
    units = [(s, seed, cfg) for seed in cfg.train_seeds for s in cfg.subjects]
    results: list[dict] = []

    def done(r: dict) -> None:
        results.append(r)
        if on_unit is not None:
            on_unit(_study_result(cfg, command, results, t_start))

    if cfg.jobs > 1 and len(units) > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(min(cfg.jobs, len(units))) as pool:
            pool.map(_teacher_in_worker, [(s, cfg) for s in cfg.subjects], chunksize=1)
            for r in pool.imap_unordered(_unit_in_worker, units, chunksize=1):
                done(r)
    else:
        for u in units:
            done(study_unit(*u))
    order = {(s, seed): i for i, (s, seed, _) in enumerate(units)}
    results.sort(key=lambda r: order[(r["subject"], r["train_seed"])])
    return _study_result(cfg, command, results, t_start)


def _study_result(cfg: StudyConfig, command: str, results: list[dict], t_start: float) -> dict:
    return {"command": command, "machine": f"{platform.platform()} ({platform.machine()}, "
            f"{torch.get_num_threads()} torch threads)",
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "seconds": round(time.perf_counter() - t_start, 1), "model": resolve_spec(cfg.model).to_json(),
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
            "default_probe": cfg.default_probe(), "units_planned": len(cfg.subjects) * len(cfg.train_seeds),
            "units": list(results), **summarize(results)}


# ------------------------------------------------------------------------------------------------- analysis
MEASURES = ("velocity_progress", "velocity_closure", "sample_progress", "sample_closure", "subject_sim",
            "background_ok")


def unit_values(results: list[dict], row: str, measure: str) -> np.ndarray:
    return np.array([r["rows"][row][measure] for r in results if row in r["rows"]], np.float64)


FIXED_50 = ("split_5_1", "skip_first_50", "skip_last_50", "paper_split_50")     # the 50% rows with a fixed split


def summarize(results: list[dict]) -> dict:
    """Table (mean +- 95% CI over units), the paper's orderings and the selection comparison."""
    names = list(dict.fromkeys(n for r in results for n in r["rows"]))
    table = {n: {k: mean_ci(unit_values(results, n, k)) for k in MEASURES if all(k in r["rows"][n] for r in results
                                                                                   if n in r["rows"])}
             for n in names}
    return {"table": table, "orderings": orderings(results), "ratio": ratio(results),
            "fixed_split_ratios": {n: ratio(results, n) for n in FIXED_50 if any(n in r["rows"] for r in results)},
            "selection": selection_summary(results), "signal": signal(results)}


def signal(results: list[dict], row: str = "full_lora", measure: str = PRIMARY) -> dict | None:
    """Full LoRA's primary score over the base's 0 in CI half-widths, two ways: over units (subject x training seed,
    the table's CI) and over subjects (each subject's mean over its seeds, n = subjects): seeds of one subject are not
    independent draws of the subject effect, so the second is the one that says how the instrument generalises."""
    vals = [(r["subject"], r["rows"][row][measure]) for r in results if row in r["rows"]]
    if not vals:
        return None
    per_subject: dict[str, list[float]] = {}
    for subject, v in vals:
        per_subject.setdefault(subject, []).append(v)
    units = mean_ci(v for _, v in vals)
    subjects = mean_ci(float(np.mean(v)) for v in per_subject.values())
    ratio_of = lambda c: round(c["mean"] / c["ci95"], 2) if c["ci95"] and c["ci95"] == c["ci95"] else None  # noqa: E731
    return {"row": row, "measure": measure, "units": {**units, "half_widths_above_base": ratio_of(units)},
            "subjects": {**subjects, "half_widths_above_base": ratio_of(subjects)},
            "per_subject_means": {k: round(float(np.mean(v)), 4) for k, v in per_subject.items()}}


def paired(results: list[dict], a: str, b: str, measure: str = PRIMARY) -> dict | None:
    """a - b per unit (units holding both): mean +- 95% CI."""
    both = [r for r in results if a in r["rows"] and b in r["rows"]]
    if not both:
        return None
    d = np.array([r["rows"][a][measure] - r["rows"][b][measure] for r in both])
    return mean_ci(d)


def ratio_by_plan(results: list[dict], a: str = "blockskip_50", b: str = "full_lora") -> dict:
    """The headline ratio's parts by the split `a` trained with ("front/back" -> units, the two means, their
    ratio), most units first: where the selection's pick moves between units, how much of the ratio it carries."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for r in results:
        if a in r["rows"] and b in r["rows"] and "plan" in r["rows"][a]:
            plan = "/".join(map(str, r["rows"][a]["plan"]))
            groups.setdefault(plan, []).append((r["rows"][a][PRIMARY], r["rows"][b][PRIMARY]))
    out = {}
    for plan, pairs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        num, den = (float(np.mean(x)) for x in zip(*pairs))
        out[plan] = {"units": len(pairs), "blockskip": num, "full": den, "ratio": num / den if den else float("nan")}
    return out


def bootstrap_ratio(num: np.ndarray, den: np.ndarray, n: int = 10000, seed: int = 0) -> tuple[float, float, float]:
    """mean(num) / mean(den) and its 95% paired-bootstrap interval over units."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(num), size=(n, len(num)))
    r = num[idx].mean(1) / den[idx].mean(1)
    return float(num.mean() / den.mean()), float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def ratio(results: list[dict], a: str = "blockskip_50", b: str = "full_lora") -> dict:
    """The paper's headline: BlockSkip 50% keeps 95% of LoRA's subject fidelity (0.6963 / 0.7324 DINO)."""
    out = {}
    for measure in ins.ANCHORED:
        both = [r for r in results if a in r["rows"] and b in r["rows"] and measure in r["rows"][b]]
        if len(both) < 2:
            continue
        num = np.array([r["rows"][a][measure] for r in both])
        den = np.array([r["rows"][b][measure] for r in both])
        if den.mean() <= 0:
            continue
        est, lo, hi = bootstrap_ratio(num, den)
        d = mean_ci(den)
        if len(both) < 4 or not d["mean"] - d["ci95"] > 0:
            # a ratio to a denominator whose CI reaches 0 has no upper bound: no verdict either way
            verdict = (f"unresolved: full LoRA's {measure} {d['mean']:.3f} +- {d['ci95']:.3f} is not clear of 0"
                       if len(both) >= 4 else f"unresolved: {len(both)} units (a bootstrap needs more)")
        else:
            verdict = ("confirmed (95% inside the CI)" if lo <= 0.95 <= hi else
                       "refuted: above 95%" if lo > 0.95 else "refuted: below 95%")
        out[measure] = {"ratio": round(est, 4), "ci95": [round(lo, 4), round(hi, 4)], "units": len(both),
                        "paper": 0.95, "verdict": verdict}
    return out


# (label, a, b, the paper's evidence): the claim is a > b
CLAIMS = [
    ("residuals: with > zeroed", "blockskip_50", "no_residual_50", "DINO 0.7150 vs 0.4301"),
    ("selected split > skip first 50%", "blockskip_50", "skip_first_50", "DINO 0.7150 vs 0.6651"),
    ("selected split > skip last 50%", "blockskip_50", "skip_last_50", "DINO 0.7150 vs 0.4808"),
    ("skip first 50% > skip last 50%", "skip_first_50", "skip_last_50", "DINO 0.6651 vs 0.4808"),
    ("dynamic patches > fixed resize", "blockskip_50", "fixed_resize_50", "DINO 0.7253 vs 0.7164"),
    ("full LoRA > BlockSkip 30%", "full_lora", "blockskip_30", "DINO 0.7324 vs 0.7194"),
    ("BlockSkip 30% > BlockSkip 50%", "blockskip_30", "blockskip_50", "DINO 0.7194 vs 0.6963"),
    ("selected split > the paper's split scaled (ours)", "blockskip_50", "paper_split_50", "-"),
    ("fixed 5/1 split > selected split (ours)", "split_5_1", "blockskip_50", "-"),
    ("fixed 5/1 split > skip first 50% (ours)", "split_5_1", "skip_first_50", "-"),
    ("tuned probe > base probe, 50% (ours)", "blockskip_50_tuned_probe", "blockskip_50_base_probe", "-"),
    ("tuned probe > base probe, 30% (ours)", "blockskip_30_tuned_probe", "blockskip_30_base_probe", "-"),
]
# (label, a, b): the claim is a == b (within EQUIVALENCE of the primary measure)
SAME = [
    ("compressed cache = fp32 cache", "blockskip_50_default_codec", "blockskip_50"),
    ("ExecuTorch-trained LoRA = eager", "blockskip_50_executorch", "blockskip_50"),
    ("ORT-trained LoRA = eager", "blockskip_50_ort", "blockskip_50"),
    ("qd8 integer matmuls = int8 program (ExecuTorch)", "blockskip_50_executorch_qd8", "blockskip_50_executorch_int8"),
]
EQUIVALENCE = 0.02


def verdict_greater(d: dict) -> str:
    lo, hi = d["mean"] - d["ci95"], d["mean"] + d["ci95"]
    if d["n"] < 2:
        return "unresolved (one unit)"
    return "confirmed" if lo > 0 else "refuted" if hi < 0 else "unresolved (CI includes 0)"


def verdict_same(d: dict) -> str:
    lo, hi = d["mean"] - d["ci95"], d["mean"] + d["ci95"]
    if d["n"] < 2:
        return "unresolved (one unit)"
    if -EQUIVALENCE <= lo and hi <= EQUIVALENCE:
        return f"confirmed (difference within +-{EQUIVALENCE})"
    return "refuted" if lo > EQUIVALENCE or hi < -EQUIVALENCE else f"unresolved (CI reaches past +-{EQUIVALENCE})"


def orderings(results: list[dict]) -> dict:
    """Each claim as a paired difference over units on every anchored measure; the verdict is the primary measure's."""
    out = {}
    for label, a, b, paper in CLAIMS:
        a, b = _row_name(results, a), _row_name(results, b)
        d = paired(results, a, b)
        if d is None:
            continue
        if _same_plan_everywhere(results, a, b):
            out[label] = {"a": a, "b": b, "verdict": "empty comparison (the same plan on every unit)",
                          "paper": paper, PRIMARY: d}
            continue
        out[label] = {"a": a, "b": b, "verdict": verdict_greater(d), "paper": paper,
                      **_paired_measures(results, a, b)}
    for label, a, b in SAME:
        d = paired(results, a, b)
        if d is not None:
            out[label] = {"a": a, "b": b, "verdict": verdict_same(d), "paper": "-", **_paired_measures(results, a, b)}
    return out


def _row_name(results: list[dict], name: str) -> str:
    """`blockskip_50_base_probe` when the study ran it, else `blockskip_50` when that row used the same probe (the
    study's default probe): one training, two names."""
    if not results or any(name in r["rows"] for r in results):
        return name
    for probe in ("base", "tuned"):
        plain = name.removesuffix(f"_{probe}_probe")
        if plain != name and json.loads(results[0].get("config_key", "{}")).get("default_probe") == probe:
            return plain
    return name


def _paired_measures(results: list[dict], a: str, b: str) -> dict:
    both = [r for r in results if a in r["rows"] and b in r["rows"]]
    return {m: paired(results, a, b, m) for m in (*ins.ANCHORED, "subject_sim")
            if all(m in r["rows"][a] and m in r["rows"][b] for r in both)}


def _same_plan_everywhere(results: list[dict], a: str, b: str) -> bool:
    ma, mb = [r["methods"].get(n) for n in (a, b) for r in results[:1]]
    if ma is None or mb is None or (ma["dynamic_patches"], ma["zero_residuals"]) != (mb["dynamic_patches"],
                                                                                        mb["zero_residuals"]):
        return False
    return all(r["rows"][a]["plan"] == r["rows"][b]["plan"] for r in results if a in r["rows"] and b in r["rows"])


def selection_summary(results: list[dict]) -> dict:
    """Per unit: the splits each probe chose and the primary measure they reached."""
    rows = []
    for r in results:
        row = {"subject": r["subject"], "train_seed": r["train_seed"]}
        for probe, sel in r["selections"].items():
            for ratio_key, v in sel.items():
                row[f"{probe}_{ratio_key}"] = v["plan"]
                m = f"blockskip_{ratio_key}_{probe}_probe"
                source = _row_name([r], m)            # the plain blockskip rows use the default probe
                if source in r["rows"]:
                    row[f"{m}_{PRIMARY}"] = round(r["rows"][source][PRIMARY], 4)
            row[f"{probe}_seconds"] = next(iter(sel.values()))["seconds"]
        rows.append(row)
    return {"units": rows}


# ------------------------------------------------------------------------------------------------- outputs
def _save_grid(path: Path, refs: list[torch.Tensor], images: dict[str, torch.Tensor], cols: int) -> None:
    px = next(iter(images.values())).shape[-1]
    ref_row = torch.nn.functional.interpolate(torch.stack(refs), size=(px, px), mode="area")
    rows = [ref_row] + list(images.values())
    padded = [torch.cat([r, torch.ones(cols - len(r), *r.shape[1:])]) if len(r) < cols else r[:cols] for r in rows]
    g = grid(torch.cat(padded), cols)
    save_figure_png(to_uint8_image(g).resize((g.shape[-1] * 3, g.shape[-2] * 3), 0), path)
    (path.with_suffix(".txt")).write_text("rows: references, " + ", ".join(images) + "\n")


def save_figure_png(im, path: Path) -> None:
    """A figure for people, in a 256-colour palette: a study grid's file shrinks to about a fifth (the tree travels
    to a device machine within 64 MiB beside the GPU payload), a few levels off on average. Max coverage, not median
    cut: median cut hands out colours by pixel count, and on a study grid it turned the teal star's small orange
    centre yellow."""
    from PIL import Image
    im.convert("RGB").quantize(256, method=Image.Quantize.MAXCOVERAGE, kmeans=1,
                               dither=Image.Dither.NONE).save(path, optimize=True)


def _rm_tree(p: Path) -> None:
    import shutil
    shutil.rmtree(p, ignore_errors=True)


def _fmt(c: dict | None) -> str:
    return "-" if c is None else f"{c['mean']:.3f} +- {c['ci95']:.3f}"


def _plans(result: dict, name: str) -> str:
    plans = [tuple(u["rows"][name]["plan"]) for u in result["units"] if "plan" in u["rows"].get(name, {})]
    if not plans:
        return "-"
    counts = {p: plans.count(p) for p in dict.fromkeys(plans)}
    return ", ".join(f"{p[0]}/{p[1]}" + (f" x{c}" if len(counts) > 1 else "") for p, c in counts.items())


def _teacher_words(teacher: dict) -> str:
    if teacher.get("mode", "full") == "lora":
        return f"planted rank-{teacher['rank']} LoRA (all blocks, the students' targets)"
    return "full fine-tune"


def _key_with_methods(u: dict) -> dict:
    """A unit's config key rewritten to name its current rows (`u["methods"]`, in their order); returns the key."""
    key = json.loads(u["config_key"])
    key["methods"] = list(u["methods"])
    u["config_key"] = json.dumps(key, sort_keys=True)
    return key


def _record_merge(result: dict, other: dict, name: str, **what) -> None:
    """`merged`: the command, machine and date of each result joined into this one, and what it added."""
    result.setdefault("merged", []).append({k: other.get(k) for k in ("command", "machine", "date_utc", "seconds")}
                                           | what | {"from": name})


def project_units(result: dict, methods: list[str]) -> None:
    """Keep only `methods`' rows (and the anchors) of a saved result, in place, as if it had been run with
    `--methods` those: each method's LoRA trains on its own (same unit seed, same selection), so a unit's rows do not
    depend on which other methods ran beside them. The units' config keys and selections (only the probes those rows
    use) become a run's on just these, so `add_units` joins a result of every row with one run on these."""
    missing = sorted({m for u in result["units"] for m in methods if m not in u["methods"]})
    if missing:
        raise ValueError(f"project: the result has no row {', '.join(missing)}")
    for u in result["units"]:
        for n in u["methods"]:
            if n not in methods:
                u["rows"].pop(n, None)
        u["methods"] = {n: u["methods"][n] for n in methods}
        key = _key_with_methods(u)
        probes = {METHODS[n].plan.partition(":")[2] or key["default_probe"] for n in methods
                  if METHODS[n].plan.startswith("sel")}
        u["selections"] = {p: v for p, v in u["selections"].items() if p in probes}
    result["config"]["methods"] = list(methods)


def add_units(result: dict, other: dict, name: str) -> None:
    """Add the units of a saved result `other` to `result` (in place): every unit must carry `result`'s config key
    (the same methods, training, teacher and model weights) and no (subject, training seed) may come twice.
    config.subjects / train_seeds become the union (units planned: their product); `merged` records each added
    result's command, machine and date."""
    key = result["units"][0]["config_key"]
    have = {(u["subject"], u["train_seed"]) for u in result["units"]}
    for u in other["units"]:
        if u["config_key"] != key:
            raise ValueError(f"{name}: unit {u['subject']} seed {u['train_seed']} was run with another config "
                             "(methods, training, teacher or model weights); not added")
        if (u["subject"], u["train_seed"]) in have:
            raise ValueError(f"{name}: unit {u['subject']} seed {u['train_seed']} is already in the result")
        have.add((u["subject"], u["train_seed"]))
    result["units"] += other["units"]
    cfg = result["config"]
    cfg["subjects"] = list(dict.fromkeys(cfg["subjects"] + other["config"]["subjects"]))
    cfg["train_seeds"] = sorted(set(cfg["train_seeds"]) | set(other["config"]["train_seeds"]))
    result["units_planned"] = len(cfg["subjects"]) * len(cfg["train_seeds"])
    _record_merge(result, other, name, units=len(other["units"]))


ANCHOR_ROWS = ("base (no LoRA)", "teacher", "fresh photos")


def add_rows(result: dict, other: dict, name: str, rtol: float = 1e-6) -> None:
    """Add the rows of a saved result `other` to `result`'s units, in place: a run of other methods on the same units
    (subject x training seed), e.g. the remaining rows on the seeds a two-row run covered. Refused unless both hold
    the same units, every config key agrees but for its methods, no row comes twice, the anchors and the base ->
    teacher distances agree (to `rtol`: the same teacher, base and noise) and a probe both ran picked the same
    splits. The units' methods become the union (`project_units` orders them); `merged` records the added result."""
    def unit_key(u: dict) -> dict:
        key = json.loads(u["config_key"])
        key.pop("methods")
        return key

    def close(a: dict, b: dict) -> bool:
        return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= rtol * max(1.0, abs(a[k])) for k in a)

    theirs = {(u["subject"], u["train_seed"]): u for u in other["units"]}
    ours = {(u["subject"], u["train_seed"]): u for u in result["units"]}
    if theirs.keys() != ours.keys():
        raise ValueError(f"{name}: holds units {sorted(theirs)}, the result {sorted(ours)}; rows join the same units")
    for unit, u in ours.items():
        o, where = theirs[unit], f"{name}: unit {unit[0]} seed {unit[1]}"
        if unit_key(u) != unit_key(o):
            raise ValueError(f"{where} was run with another config (training, teacher or model weights); not added")
        twice = sorted(set(u["methods"]) & set(o["methods"]))
        if twice:
            raise ValueError(f"{where} has row(s) {', '.join(twice)} the result has too")
        for anchor in ANCHOR_ROWS:
            if not close(u["rows"][anchor], o["rows"][anchor]):
                raise ValueError(f"{where}: its {anchor!r} row differs from the result's (another teacher or base)")
        if not close(u["distances"], o["distances"]):
            raise ValueError(f"{where}: its base -> teacher distances differ from the result's")
        for probe, picks in o["selections"].items():
            mine = u["selections"].get(probe, picks)
            if any(mine[r]["plan"] != picks[r]["plan"] for r in picks.keys() & mine.keys()):
                raise ValueError(f"{where}: its {probe} probe picked other splits than the result's")
            u["selections"][probe] = {**picks, **mine}
    for unit, u in ours.items():
        o = theirs[unit]
        u["methods"].update(o["methods"])
        u["rows"].update({n: o["rows"][n] for n in o["methods"]})
        _key_with_methods(u)
    result["config"]["methods"] = list(dict.fromkeys(result["config"]["methods"] + other["config"]["methods"]))
    _record_merge(result, other, name, rows=list(other["config"]["methods"]))


def _merged_words(m: dict) -> str:
    if "rows" in m:
        return f"rows {', '.join(m['rows'])}, personalization_study.py --add-rows {m['from']}"
    return f"{m['units']} units, personalization_study.py --add-units {m['from']}"


def to_markdown(result: dict) -> str:
    cfg = result["config"]
    t = result["table"]
    units = result["units"]
    partial = len(units) < result.get("units_planned", len(units))
    lines = ["# Personalization study on the planted-subject instrument (flux-testbed)", "",
             *([f"**Partial: {len(units)} of {result['units_planned']} units done.**", ""] if partial else []),
             f"Command: `{result['command']}`  ", f"Machine: {result['machine']}  ",
             f"Date (UTC): {result['date_utc']}; wall time {result['seconds']} s  ",
             *[f"Added ({_merged_words(m)}): `{m['command']}` on {m['machine']}, {m['date_utc']}, wall time "
               f"{m['seconds']} s  " for m in result.get("merged", [])],
             f"Units: {len(units)} = subjects {', '.join(cfg['subjects'])} x training seeds {cfg['train_seeds']}; "
             f"per unit {len(units[0]['prompts']['eval'])} eval prompts x sample seeds {cfg['seeds']} (paired "
             f"samples) and {cfg['photos_per_prompt']} fresh photos x {len(ins.PROBE_TIMES)} times per prompt "
             f"(velocity inputs); LoRA {cfg['steps']} steps x accum {cfg['grad_accum']}, rank {cfg['rank']}, lr "
             f"{cfg['lr']}; teacher: {_teacher_words(cfg['teacher'])} {cfg['teacher']['steps']} steps x "
             f"{cfg['teacher']['batch']}, lr "
             f"{cfg['teacher']['lr']}, prior weight {cfg['teacher']['prior_weight']}; blockskip_30 / _50 rows use "
             f"the {result['default_probe']} probe", "",
             "velocity / sample progress (the primary measure is velocity progress): the share of the way along "
             "the base -> teacher direction a method's velocity field (samples) moved; closure: the share of the "
             "base -> teacher distance it closed, which also counts movement sideways of that direction (base 0, "
             "teacher 1 by construction on all four; instrument.py). subject_sim: the fixed embedder's cosine to "
             "the references (a fresh photo of the subject scores as the `fresh photos` row). background_ok: the "
             "prompted background. Mean over units +- 95% Student-t CI (units = subject x training seed).", "",
             "| method | plan (front/back) | velocity progress | velocity closure | sample progress | sample closure "
             "| subject_sim | background_ok |", "|---|---|---|---|---|---|---|---|"]
    for n, r in t.items():
        lines.append(f"| {n} | {_plans(result, n)} | " + " | ".join(_fmt(r.get(m)) for m in MEASURES) + " |")
    full = t.get("full_lora", {}).get(PRIMARY)
    sig = result.get("signal")
    if full:
        lines += ["", f"Signal: full LoRA's {PRIMARY} {full['mean']:.3f} +- {full['ci95']:.3f} stands "
                  f"{full['mean'] / max(full['ci95'], 1e-12):.1f} CI half-widths above the base's 0 over units."]
        if sig and sig["subjects"]["n"] > 1:
            s_ = sig["subjects"]
            lines[-1] += (f" Over subjects (each subject's mean over its seeds, n = {s_['n']}): {s_['mean']:.3f} +- "
                          f"{s_['ci95']:.3f}, {s_['half_widths_above_base']} half-widths (per subject: "
                          + ", ".join(f"{k} {v:.3f}" for k, v in sig["per_subject_means"].items()) + ").")
    lines += ["", "## The paper's claims on this instrument", ""]
    for measure, r in result["ratio"].items():
        lines.append(f"- BlockSkip 50% / full LoRA ({measure}): **{r['ratio']:.3f}** (95% bootstrap CI "
                     f"{r['ci95'][0]:.3f} - {r['ci95'][1]:.3f}, {r['units']} units); paper 0.95: {r['verdict']}")
    for name, by_measure in result.get("fixed_split_ratios", {}).items():
        parts = [f"{m.replace('_', ' ')} {r['ratio']:.3f} (95% bootstrap CI {r['ci95'][0]:.3f} - {r['ci95'][1]:.3f})"
                 for m, r in by_measure.items() if m in (PRIMARY, "sample_progress")]
        if parts:
            units_n = next(iter(by_measure.values()))["units"]
            lines.append(f"- {name} ({_plans(result, name)}) / full LoRA, {units_n} units: " + "; ".join(parts))
    by_plan = ratio_by_plan(units)
    if len(by_plan) > 1:
        lines.append(f"- By the split BlockSkip 50% trained with (post hoc, {PRIMARY.replace('_', ' ')}): " + "; ".join(
            f"{p} on {v['units']} units {v['blockskip']:.3f} / {v['full']:.3f} = {v['ratio']:.3f}"
            for p, v in by_plan.items()))
    lines += ["", "| claim (a > b unless =) | paper | a - b: velocity progress | velocity closure | sample progress "
              "| verdict |", "|---|---|---|---|---|---|"]
    for label, c in result["orderings"].items():
        lines.append(f"| {label} | {c['paper']} | {_fmt(c.get(PRIMARY))} | {_fmt(c.get('velocity_closure'))} | "
                     f"{_fmt(c.get('sample_progress'))} | **{c['verdict']}** |")
    lines += ["", f"Verdicts on the paired {PRIMARY.replace('_', ' ')} difference over units: confirmed = the 95% CI lies on "
              f"the claimed side of 0 (for '=' claims: inside +-{EQUIVALENCE}), refuted = on the other side, "
              "unresolved = it straddles.", "", "## Selection: base probe vs tuned probe (per unit)", "",
              f"| subject | seed | 30%: base / tuned | 50%: base / tuned | 50% {PRIMARY.replace('_', ' ')}: base / tuned |",
              "|---|---|---|---|---|"]
    for row in result["selection"]["units"]:
        def pl(k):
            return f"{row[k][0]}/{row[k][1]}" if k in row else "-"
        vb, vt = row.get(f"blockskip_50_base_probe_{PRIMARY}"), row.get(f"blockskip_50_tuned_probe_{PRIMARY}")
        lines.append(f"| {row['subject']} | {row['train_seed']} | {pl('base_30')} / {pl('tuned_30')} | "
                     f"{pl('base_50')} / {pl('tuned_50')} | {'-' if vb is None else f'{vb:.3f}'} / "
                     f"{'-' if vt is None else f'{vt:.3f}'} |")
    lines += ["", "## Cost and runtime agreement (mean over units)", "",
              "| method | cache codec | cache MB | train s | LoRA vs eager twin (max rel diff, max over units) |",
              "|---|---|---|---|---|"]
    for n in t:
        rs = [u["rows"][n] for u in units if n in u["rows"] and "cache_bytes" in u["rows"][n]]
        if not rs:
            continue
        diffs = [r["lora_vs_eager"]["max_rel_diff"] for r in rs if "lora_vs_eager" in r]
        reused = sorted({r["same_training_as"] for r in rs if "same_training_as" in r})
        lines.append(f"| {n} | `{rs[0]['cache_codec']}` | {np.mean([r['cache_bytes'] for r in rs]) / 1e6:.1f} | "
                     f"{np.mean([r['train_s'] for r in rs]):.1f} | "
                     f"{f'{max(diffs):.2e}' if diffs else '-'}{' (reused: ' + ', '.join(reused) + ')' if reused else ''} |")
    lines += ["", f"## Per unit ({PRIMARY.replace('_', ' ')})", "",
              "| unit | " + " | ".join(t) + " |", "|---|" + "---|" * len(t)]
    for u in units:
        lines.append(f"| {u['subject']} s{u['train_seed']} | " + " | ".join(
            f"{u['rows'][n][PRIMARY]:.3f}" if n in u["rows"] and PRIMARY in u["rows"][n]
            else "-" for n in t) + " |")
    lines += ["", "Prompts (train / eval):", ""] + [f"- {u['subject']}: `{u['prompts']['train']}` / " +
                                                   ", ".join(f"`{p}`" for p in u["prompts"]["eval"])
                                                   for u in units if u["train_seed"] == units[0]["train_seed"]]
    lines += ["", "Grids: `fidelity_<subject>.png` (first training seed): rows = references, then the rows listed "
              "in `fidelity_<subject>.txt` (fresh photos, base, teacher, each method); columns = eval prompts x "
              "sample seeds, the same noise in every row."]
    return "\n".join(lines) + "\n"
