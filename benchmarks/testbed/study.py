"""The personalization study: every held-out subject x every method -> LoRA -> generations -> fidelity scores.

    for subject in SUBJECTS:      reference photos (64 px) -> folder
      for method in METHODS:      compile a bundle (plan, schedule, residual cache) -> train -> LoRA file
                                  -> load into the full diffusers model -> generate eval prompts x seeds -> score
    -> table (per method, pooled over subjects, 95% CI) + per-subject rows + grids + the orderings the paper reports

Methods (PAPER.md): full LoRA (plan 0/0); BlockSkip 30% and 50% (splits chosen per subject by
`ditskip_edge.selection` (cross-attention masking, as `compile --skip-ratio` does) when that module exists, else the
paper's FLUX splits scaled to this model's blocks, or fixed with StudyConfig.fixed_plans); the ablations at the 50% plan:
no residual (residuals zeroed), fixed resize (no dynamic patches); and skipping the first / last 50% of blocks.

Cache codec and trainer per method:
- `Method.codec`: a key of `CODECS` (name -> the `compile --cache-codec` spec): "fp32" (uncompressed) or "default"
  (the compiler's default compressed codec). Every row names its codec; the ablations use fp32.
- `Method.runtime`: a key of `TRAINERS`: "eager" (the reference trainer), "executorch" (the bundle also gets the
  fp32 ExecuTorch training program and `export.executorch_trainer` trains with the ExecuTorch runtime alone) or
  "ort" (fp32 ONNX Runtime Training artifacts, `export.ort_trainer`; ORT's AdamW is the Hugging Face variant).
  A runtime row's LoRA is compared tensor by tensor with the eager row of the same plan and codec.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch

from ditskip_edge.cache import DEFAULT_CODEC
from ditskip_edge.compile import CompileRequest, compile_bundle
from ditskip_edge.generate import generate, grid, load_model
from ditskip_edge.images import to_uint8_image
from ditskip_edge.lora import LoraSpec
from ditskip_edge.models.loading import builtin_weights_path, resolve_spec
from ditskip_edge.runtime.bundle import CACHE_DIR, OptimizerSpec, sha256_file
from ditskip_edge.runtime.schedule import ScheduleConfig
from export.executorch_stage import ExecutorchPrograms
from export.ort_stage import OrtPrograms

from .metrics import mean_ci, score_images
from .scenes import SUBJECTS, eval_prompts, reference_images, subject_prompt

MODEL = "flux-testbed"


@dataclass(frozen=True)
class Method:
    name: str
    n_front: int
    n_back: int
    dynamic_patches: bool = True
    zero_residuals: bool = False     # ablation: skip the spans but add nothing in their place
    codec: str = "fp32"              # residual-cache codec: a key of CODECS
    runtime: str = "eager"           # trainer: a key of TRAINERS
    note: str = ""


def _split(k: int, front_share: float) -> tuple[int, int]:
    n = int(round(k * front_share))
    return n, k - n


def default_plans(num_blocks: int) -> dict[str, tuple[int, int, str]]:
    """30% / 50% plans: selection by cross-attention masking when available on this checkout, else the paper's FLUX
    splits (30%: 7 front / 10 back; 50%: 19 / 10 of 57 blocks) scaled to `num_blocks`."""
    k30, k50 = int(round(0.3 * num_blocks)), int(round(0.5 * num_blocks))
    return {"30": (*_split(k30, 7 / 17), "paper split scaled"), "50": (*_split(k50, 19 / 29), "paper split scaled")}


def selected_plans(subject_dir: Path, prompt: str, seed: int = 0) -> dict[str, tuple[int, int, str]] | None:
    """30% / 50% splits chosen by cross-attention masking (ditskip_edge.selection, the same verb
    `compile --skip-ratio` uses) on the base model with the subject's photos; None when that module is absent."""
    try:
        from ditskip_edge.selection import SelectionConfig, make_probe, select_splits
    except ImportError:
        return None
    from ditskip_edge.images import load_photos
    from ditskip_edge.models.loading import build_transformer, build_vae
    from ditskip_edge.plan import skip_budget
    spec = resolve_spec(MODEL)
    transformer, vae = build_transformer(spec), build_vae(spec)
    num_blocks = spec.transformer_config["num_layers"] + spec.transformer_config["num_single_layers"]
    probe = make_probe(spec, transformer, vae, load_photos(subject_dir, spec.data_px), prompt, seed,
                       SelectionConfig())
    ratios = {"30": 0.3, "50": 0.5}
    results = select_splits(probe, [skip_budget(num_blocks, r) for r in ratios.values()], list(ratios.values()))
    how = f"selection ({probe.config.method}, {getattr(probe.embedder, 'name', '?')})"
    return {key: (r["chosen"][0], r["chosen"][1], how) for key, r in zip(ratios, results)}


def methods(num_blocks: int, plans: dict[str, tuple[int, int, str]] | None = None) -> dict[str, Method]:
    plans = plans or default_plans(num_blocks)
    f30, b30, how30 = plans["30"]
    f50, b50, how50 = plans["50"]
    half = num_blocks // 2
    ms = [Method("full_lora", 0, 0, note="LoRA on all blocks"),
          Method("blockskip_30", f30, b30, note=how30),
          Method("blockskip_50", f50, b50, note=how50),
          Method("blockskip_50_default_codec", f50, b50, codec="default", note=f"{how50}; compressed cache"),
          Method("blockskip_50_executorch", f50, b50, runtime="executorch",
                 note=f"{how50}; ExecuTorch runtime trainer (fp32 program)"),
          Method("blockskip_50_ort", f50, b50, runtime="ort",
                 note=f"{how50}; ONNX Runtime Training trainer (fp32 weights, ORT's AdamW)"),
          Method("paper_split_50", *default_plans(num_blocks)["50"][:2],
                 note="the paper's FLUX 50% split (19/10 of 57) scaled, not selected"),
          Method("no_residual_50", f50, b50, zero_residuals=True, note="ablation: residuals zeroed"),
          Method("skip_first_50", half, 0, note="ablation: front span only"),
          Method("skip_last_50", 0, half, note="ablation: back span only"),
          Method("fixed_resize_50", f50, b50, dynamic_patches=False, note="ablation: whole photo resized, no crops")]
    return {m.name: m for m in ms}


# ------------------------------------------------------------------------------------------ codecs, trainers
CODECS: dict[str, str] = {"fp32": "fp32", "default": DEFAULT_CODEC}        # Method.codec -> compile --cache-codec
TRAINERS: dict[str, Callable[[Path, Path], Path]] = {}                     # Method.runtime -> (bundle, run) -> LoRA
DEVICE_PRECISION = "fp32"                                                   # the device rows' programs


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


def train_device_lora(runtime: str, bundle_dir: Path, run_dir: Path) -> Path:
    """A device runtime's trainer (the runtime package alone), on the bundle's fp32 program."""
    from ditskip_edge.runtime.loop import RunConfig
    from ditskip_edge.runtime.run import train_bundle
    cfg = RunConfig(run_dir=run_dir, resume=False, progress=False)
    return Path(train_bundle(bundle_dir, runtime, cfg, precision=DEVICE_PRECISION)["lora"])


TRAINERS["eager"] = lambda bundle, run: train_eager_lora(bundle, run)
TRAINERS["executorch"] = lambda bundle, run: train_device_lora("executorch", bundle, run)
TRAINERS["ort"] = lambda bundle, run: train_device_lora("ort", bundle, run)


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
    steps: int = 200
    grad_accum: int = 1
    rank: int = 4
    lora_targets: list[str] = field(default_factory=list)    # module suffixes in a block; [] = the arch default
    lr: float = 1e-3
    train_seed: int = 0
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    prompts: int | None = None               # None: every eval prompt
    sample_steps: int = 20
    guidance: float = 3.0
    n_references: int = 5
    keep_bundles: bool = False
    fixed_plans: bool = False                # True: the paper's splits scaled, no selection
    jobs: int = 1                            # subjects studied in parallel worker processes (1 torch thread each)


def personalize(subject_dir: Path, prompt: str, work: Path, method: Method, cfg: StudyConfig) -> tuple[Path, dict]:
    spec = resolve_spec(MODEL)
    if method.codec not in CODECS:
        raise ValueError(f"cache codec {method.codec!r}: expected one of {list(CODECS)}")
    if method.runtime not in TRAINERS:
        raise ValueError(f"runtime {method.runtime!r}: expected one of {list(TRAINERS)}")
    sched = ScheduleConfig(steps=cfg.steps, grad_accum=cfg.grad_accum, s_min_px=spec.train_px,
                           s_max_px=spec.data_px, multiple_px=spec.pixel_multiple, seed=cfg.train_seed,
                           dynamic_patches=method.dynamic_patches)
    bundle = work / "bundle"
    programs = {"eager": [], "executorch": [ExecutorchPrograms((DEVICE_PRECISION,), preprocess=False)],
                "ort": [OrtPrograms((DEVICE_PRECISION,))]}[method.runtime]
    t0 = time.perf_counter()
    summary = compile_bundle(CompileRequest(model=MODEL, images=str(subject_dir), prompt=prompt,
                                            out=str(bundle), n_front=method.n_front, n_back=method.n_back,
                                            schedule=sched, lora=LoraSpec(rank=cfg.rank, alpha=float(cfg.rank),
                                                          targets=list(cfg.lora_targets)),
                                            optimizer=OptimizerSpec(lr=cfg.lr), overwrite=True,
                                            cache_codec=CODECS[method.codec], programs=programs))
    t1 = time.perf_counter()
    if method.zero_residuals:
        lora = train_eager_lora(bundle, work / "run", zero_residuals=True)
    else:
        lora = TRAINERS[method.runtime](bundle, work / "run")
    t2 = time.perf_counter()
    return lora, {"compile_s": round(t1 - t0, 2), "train_s": round(t2 - t1, 2), "cache_codec": CODECS[method.codec],
                  "cache_bytes": _cache_bytes(bundle), "runtime": method.runtime,
                  "kept_blocks": summary["kept_blocks"], "kept_weight_bytes": summary["kept_weight_bytes"]}


def _cache_bytes(bundle: Path) -> int:
    """Bytes of the residual cache as stored in the bundle (shards + index)."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    return int(sum(f["bytes"] for name, f in manifest["files"].items() if name.startswith(CACHE_DIR + "/")))


def study_subject(sname: str, cfg: StudyConfig) -> dict:
    """One held-out subject, every method: scores (pooled-ready per-image lists too), methods, prompts, grid PNG.
    Saved as work/<subject>/subject_result.json; a rerun with the same config and model weights reuses it (nothing
    lost when a later subject fails)."""
    spec = resolve_spec(MODEL)
    num_blocks = spec.transformer_config["num_layers"] + spec.transformer_config["num_single_layers"]
    names = cfg.methods or list(methods(num_blocks))
    out = Path(cfg.out)
    work = out / "work" / sname
    saved = work / "subject_result.json"
    key = json.dumps({"model_sha256": sha256_file(builtin_weights_path(spec)),      # retrained model: no reuse
                      **{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()
                         if k not in ("subjects", "jobs")}}, sort_keys=True)
    if saved.is_file() and json.loads(saved.read_text()).get("config_key") == key:
        return json.loads(saved.read_text())
    subject = SUBJECTS[sname]
    prompts = eval_prompts(subject)[: cfg.prompts]
    gen_prompts = [p for p, _ in prompts for _ in cfg.seeds]
    gen_bgs = [bg for _, bg in prompts for _ in cfg.seeds]
    gen_seeds = [s for _ in prompts for s in cfg.seeds]
    refs = reference_images(subject, cfg.n_references)
    sdir = work / "photos"
    sdir.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(refs):
        to_uint8_image(r).save(sdir / f"{i:02d}.png")
    plans = None if cfg.fixed_plans else selected_plans(sdir, subject_prompt(subject), cfg.train_seed)
    chosen = [methods(num_blocks, plans)[m] for m in names]
    images = {"base (no LoRA)": generate(spec, load_model(spec), gen_prompts, gen_seeds, cfg.sample_steps,
                                         cfg.guidance)}
    info: dict[str, dict] = {"base (no LoRA)": {}}
    loras: dict[str, Path] = {}
    for m in chosen:
        lora, info[m.name] = personalize(sdir, subject_prompt(subject), work / m.name, m, cfg)
        loras[m.name] = lora
        if m.runtime != "eager" and (twin := _eager_twin(m, chosen)) is not None and twin.name in loras:
            info[m.name]["lora_vs_eager"] = {"eager_method": twin.name, **lora_difference(loras[twin.name], lora)}
        images[m.name] = generate(spec, load_model(spec, lora), gen_prompts, gen_seeds, cfg.sample_steps,
                                  cfg.guidance)
        if not cfg.keep_bundles:
            _rm_tree(work / m.name / "bundle")
    scores, per_image = {}, {}
    for name, ims in images.items():
        sc = score_images(list(ims), gen_bgs, refs, subject.colour)
        scores[name] = {k: v for k, v in sc.items() if k != "per_image"} | info[name]
        per_image[name] = sc["per_image"]
    _save_grid(out / f"personalization_{sname}.png", refs, images, cols=len(gen_prompts))
    result = {"config_key": key, "subject": sname, "scores": scores, "per_image": per_image,
              "methods": {f"{m.name}@{sname}": asdict(m) for m in chosen},
              "prompts": {"train": subject_prompt(subject), "eval": [p for p, _ in prompts]}}
    saved.write_text(json.dumps(result, indent=1))
    return json.loads(saved.read_text())          # the same form a reuse returns


def _study_subject_in_worker(args: tuple[str, StudyConfig]) -> dict:
    torch.set_num_threads(1)           # one thread per worker: 2 threads per process on 2 shared cores spin
    return study_subject(*args)


def check_names(cfg: StudyConfig) -> None:
    """Unknown subjects or methods: one clear ValueError before any work (not a KeyError mid-study)."""
    known = list(methods(2))          # the names do not depend on the block count
    for kind, asked, have in [("subject", cfg.subjects, list(SUBJECTS)), ("method", cfg.methods or [], known)]:
        bad = [n for n in asked if n not in have]
        if bad:
            raise ValueError(f"unknown {kind}(s) {', '.join(bad)}: expected some of {', '.join(have)}")


def run_study(cfg: StudyConfig, command: str = "") -> dict:
    """Every subject (in cfg.jobs worker processes when > 1) -> pooled table, per-subject rows, orderings."""
    t_start = time.perf_counter()
    spec = resolve_spec(MODEL)
    check_names(cfg)
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    if cfg.jobs > 1 and len(cfg.subjects) > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(min(cfg.jobs, len(cfg.subjects))) as pool:
            results = pool.map(_study_subject_in_worker, [(s, cfg) for s in cfg.subjects], chunksize=1)
    else:
        results = [study_subject(s, cfg) for s in cfg.subjects]
    pooled: dict[str, dict[str, list[float]]] = {}
    for r in results:
        for name, per in r["per_image"].items():
            for k, v in per.items():
                pooled.setdefault(name, {}).setdefault(k, []).extend(v)
    rows = {name: {k: mean_ci(v) for k, v in d.items()} for name, d in pooled.items()}
    return {"command": command, "machine": f"{platform.platform()} ({platform.machine()}, "
            f"{torch.get_num_threads()} torch threads)",
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "seconds": round(time.perf_counter() - t_start, 1), "model": spec.to_json(),
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
            "methods": {k: v for r in results for k, v in r["methods"].items()},
            "prompts": {r["subject"]: r["prompts"] for r in results},
            "table": rows, "per_subject": {r["subject"]: r["scores"] for r in results}, "orderings": orderings(rows)}


def _eager_twin(m: Method, chosen: list[Method]) -> Method | None:
    """The eager method with the same plan, codec and data as a runtime-trained one (its reference)."""
    for o in chosen:
        if o.runtime == "eager" and replace(o, name=m.name, runtime=m.runtime, note=m.note) == m:
            return o
    return None


def _verdict(a: dict, b: dict) -> str:
    """a >= b? 'holds' / 'does not hold', and whether the gap exceeds the larger 95% half-width."""
    gap = a["mean"] - b["mean"]
    sure = abs(gap) > max(a["ci95"], b["ci95"])
    return ("holds" if gap >= 0 else "does not hold") + ("" if sure else " (within noise)")


def orderings(rows: dict) -> dict:
    """The paper's claims as checks on subject similarity (means; 'within noise' when the gap is inside the CI)."""
    checks = {}
    pairs = [("residuals far above none", "blockskip_50", "no_residual_50"),
             ("selected split above skip-first-50%", "blockskip_50", "skip_first_50"),
             ("selected split above skip-last-50%", "blockskip_50", "skip_last_50"),
             ("dynamic patches at least fixed resize", "blockskip_50", "fixed_resize_50"),
             ("selected split at least the paper's split scaled", "blockskip_50", "paper_split_50")]
    for label, a, b in pairs:
        if a in rows and b in rows:
            ra, rb = rows[a]["subject_sim"], rows[b]["subject_sim"]
            checks[label] = {"verdict": _verdict(ra, rb), "holds": bool(ra["mean"] >= rb["mean"]),
                             a: ra["mean"], b: rb["mean"]}
    for label, other in [("compressed cache keeps blockskip_50's subject similarity", "blockskip_50_default_codec"),
                         ("ExecuTorch-trained LoRA matches the eager one", "blockskip_50_executorch"),
                         ("ORT-trained LoRA matches the eager one", "blockskip_50_ort")]:
        if "blockskip_50" in rows and other in rows:
            a, b = rows[other]["subject_sim"], rows["blockskip_50"]["subject_sim"]
            same = abs(a["mean"] - b["mean"]) <= max(a["ci95"], b["ci95"])
            checks[label] = {"verdict": "holds (within CI)" if same else "does not hold", "holds": bool(same),
                             other: a["mean"], "blockskip_50": b["mean"]}
    if "blockskip_50" in rows and "full_lora" in rows and rows["full_lora"]["subject_sim"]["mean"] > 0:
        ratio = rows["blockskip_50"]["subject_sim"]["mean"] / rows["full_lora"]["subject_sim"]["mean"]
        checks["blockskip_50 keeps >= 90% of full LoRA subject similarity"] = {
            "verdict": "holds" if ratio >= 0.9 else "does not hold", "holds": bool(ratio >= 0.9),
            "ratio": round(ratio, 4)}
        a, b = rows["blockskip_50"]["background_ok"], rows["full_lora"]["background_ok"]
        same = abs(a["mean"] - b["mean"]) <= max(a["ci95"], b["ci95"])
        checks["blockskip_50 prompt fidelity within CI of full LoRA"] = {
            "verdict": "holds" if same else "does not hold", "holds": bool(same),
            "blockskip_50": a["mean"], "full_lora": b["mean"]}
    return checks


def _save_grid(path: Path, refs: list[torch.Tensor], images: dict[str, torch.Tensor], cols: int) -> None:
    px = next(iter(images.values())).shape[-1]
    ref_row = torch.nn.functional.interpolate(torch.stack(refs), size=(px, px), mode="area")
    rows = [ref_row] + list(images.values())
    padded = [torch.cat([r, torch.ones(cols - len(r), *r.shape[1:])]) if len(r) < cols else r[:cols] for r in rows]
    g = grid(torch.cat(padded), cols)
    im = to_uint8_image(g)
    im.resize((im.width * 3, im.height * 3), 0).save(path)


def _rm_tree(p: Path) -> None:
    import shutil
    shutil.rmtree(p, ignore_errors=True)


def to_markdown(result: dict) -> str:
    names = list(result["table"])
    lines = ["# Personalization study (flux-testbed)", "",
             f"Command: `{result['command']}`  ", f"Machine: {result['machine']}  ",
             f"Date (UTC): {result['date_utc']}; wall time {result['seconds']} s  ",
             f"Subjects: {', '.join(result['config']['subjects'])}; eval prompts per subject: "
             f"{len(next(iter(result['prompts'].values()))['eval'])}; "
             f"seeds: {result['config']['seeds']}; steps {result['config']['steps']} x accum "
             f"{result['config']['grad_accum']}, rank {result['config']['rank']}, lr {result['config']['lr']}", "",
             "Mean over subjects x prompts x seeds, +- 95% CI. subject_sim: fixed embedder (shape + colour "
             "histogram) cosine to the references; colour_ok / shape_iou: attribute checks; background_ok: the "
             "prompt's background colour realised (prompt fidelity).", "",
             "| method | plan (front/back) | subject_sim | colour_ok | shape_iou | background_ok |",
             "|---|---|---|---|---|---|"]
    for n in names:
        r = result["table"][n]
        ms = [m for k, m in result["methods"].items() if k.split("@")[0] == n]
        plan = ", ".join(sorted({f"{m['n_front']}/{m['n_back']}" for m in ms})) + \
            ("" if not ms or ms[0]["dynamic_patches"] else ", fixed resize") + \
            (", zeroed residuals" if ms and ms[0]["zero_residuals"] else "") if ms else "-"
        cells = [f"{r[k]['mean']:.3f} +- {r[k]['ci95']:.3f}" for k in
                 ("subject_sim", "colour_ok", "shape_iou", "background_ok")]
        lines.append(f"| {n} | {plan} | " + " | ".join(cells) + " |")
    notes = sorted({f"{k.split('@')[0]} {m['n_front']}/{m['n_back']} on {k.split('@')[1]}: {m['note']}"
                    for k, m in result["methods"].items() if k.startswith(("blockskip_", "paper_split"))})
    lines += ["", "Splits (front/back of 12 blocks):", ""] + [f"- {n}" for n in notes]
    lines += ["", "## Cache, training time, runtime agreement (per subject)", "",
              "| subject | method | cache codec | cache bytes | train s | LoRA vs eager twin (max rel diff) |",
              "|---|---|---|---|---|---|"]
    for s, d in result["per_subject"].items():
        for n, r in d.items():
            if "cache_bytes" not in r:
                continue
            diff = r.get("lora_vs_eager")
            cell = f"{diff['max_rel_diff']:.2e} vs {diff['eager_method']}" if diff else "-"
            lines.append(f"| {s} | {n} | `{r['cache_codec']}` | {r['cache_bytes']} | {r['train_s']} | {cell} |")
    lines += ["", "## The paper's orderings on this testbed", ""]
    for label, c in result["orderings"].items():
        vals = ", ".join(f"{k} {v}" for k, v in c.items() if k not in ("holds", "verdict"))
        lines.append(f"- {label}: **{c['verdict']}** ({vals})")
    lines += ["", "## Per subject (subject_sim / background_ok)", "",
              "| subject | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for s, d in result["per_subject"].items():
        lines.append(f"| {s} | " + " | ".join(f"{d[n]['subject_sim']['mean']:.3f} / {d[n]['background_ok']['mean']:.2f}"
                                               for n in names) + " |")
    lines += ["", "Prompts (train / eval):", ""] + [f"- {s}: `{d['train']}` / " + ", ".join(f"`{p}`" for p in d["eval"])
                                                   for s, d in result["prompts"].items()]
    lines += ["", "Grids: `personalization_<subject>.png`: first row the references, then one row per method "
              "(base model first), columns = prompts x seeds."]
    return "\n".join(lines) + "\n"
