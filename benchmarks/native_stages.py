"""The three device stages as the native core runs them, each its own `ditskip-run` process, measured whole: the
subject stage (photos -> subject bundle), training, generation; beside `ditskip-edge estimate` (issue 56 item 4).

    nice -n 5 .venv/bin/python benchmarks/native_stages.py --layouts flux[,sana] [--python] [--work DIR] [--compile-only]
    -> benchmarks/results/native_stages.{json,md}    (--merge A.json,B.json: one result from per-layout runs)

Per layout, ONE model bundle (no photos) compiled the way the headline rows are (device_footprint.py,
subject_stage.py measure_headline): random weights, BlockSkip 50% (front 4 / back 2 of 12 blocks for the FLUX layout,
front / back by split_for_ratio for SANA's), int8 frozen weights, LoRA rank 16, the XNNPACK training program with
block remat and its weights mapped from a .ptd, the subject stage's programs (SubjectPrograms int8, weights in .ptd
files, mapped) and the generation part (GenerationPrograms int8: the whole transformer one block kind per program,
the decoder; hash text encoder: no text programs), cache codec int8-channel (the native subject stage refuses
compile's default, which has a lowrank part). The layouts are local pipeline folders:
  flux  the FLUX layout (288M: 4 double + 8 single blocks, width 1024; 128 text tokens of 4096; flux-tiny's
        autoencoder): generation_memory.py headline_folder
  sana  the SANA layout (memory_speed.py's sana-layout-250m: SANA-600M's blocks, 12 of them, 261M parameters
        counted with the caption projection; 128 text tokens of 2304; sana-tiny's DC-AE widened to SANA's 32 latent
        channels)
Then four processes, each sampled from outside every 5 ms (device_tests/native_runtime.py measure: whole-process
RssAnon and RssFile from /proc/PID/status, nothing subtracted; CPU seconds from the child's rusage):
  fixed        ditskip-run footprint --json                          the core and ExecuTorch loaded, nothing else
  personalize  ditskip-run personalize MODEL --photos examples/photos --out S --no-train --json
  train        ditskip-run train S --steps 2 --json
  generate     ditskip-run generate S --prompt P --seed 0 --steps 2 --lora S/runs/executorch/lora --out S/x.png --json
Where this checkout's ditskip-run lacks a verb, that stage runs through the Python runtime instead (`python -m
ditskip_edge.runtime VERB`, same arguments), labelled so: its figure is the growth of RssAnon over the loaded Python
process (runtime imported, no bundle) plus the native fixed cost, as device_footprint.py compares them; `--python`
also runs all three stages so on the same model bundle (rows `python`; their RssFile is the whole Python process's).
The estimate is `ditskip-edge estimate --model FOLDER --skip-front N --skip-back M --precision int8 --rank 16
--weights mapped --backend xnnpack --subject-stage --generation-px PX --generation-steps 2
--runtime-overhead-mib FIXED`, FIXED the measured fixed cost (RssAnon of `ditskip-run footprint`): training's
`memory.footprint_bytes`, the subject stage's `subject_stage.footprint_bytes`, generation's
`generation[PX].footprint_bytes`, with the bundle's cache codec and the photos' normalised sizes
(memory_estimate/subject.py photo_sizes_of). It is computed when measuring, by the measuring checkout, with no
overhead (the one computed at compile is kept as `estimate_at_compile`); the fixed cost is added.
`--binary PATH` measures another build of ditskip-run; `--stages personalize,train` leaves generation out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

RESULTS = ROOT / "benchmarks" / "results"
MIB = 1 << 20
PHOTOS = ROOT / "examples" / "photos"          # tests/conftest.py PHOTOS
PROMPT = "a photo of sks toy"
STEPS, GRAD_ACCUM, RANK = 4, 2, 16             # the schedule's 8 samples; LoRA rank 16 as the headline rows
TRAIN_STEPS, GEN_STEPS = 2, 2
CACHE_CODEC = "int8-channel"    # the native subject stage refuses lowrank (compile's default has front.txt=lowrank-r16)
SPLITS = {"flux": (4, 2), "sana": None, "tiny": (1, 2)}        # None: split_for_ratio(blocks, 0.5)
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "131072"}   # memory_speed.py's


# ------------------------------------------------------------------------------------------------ layouts
def flux_folder(work: Path) -> str:
    from generation_memory import headline_folder
    return headline_folder(work)


def sana_folder(work: Path) -> str:
    import torch
    from memory_speed import headline_specs
    from ditskip_edge.models.loading import build_vae, save_pipeline_folder, transformer_class, _randomize_zero_params
    from ditskip_edge.models.specs import _SANA_TINY_VAE, BUILTIN_SPECS, TextSpec
    spec = headline_specs()["sana-layout-250m"]
    latent = int(spec.transformer_config["in_channels"])
    spec = replace(spec, text=TextSpec("hash", seq_len=128, dim=int(spec.transformer_config["caption_channels"])),
                   vae_config=dict(_SANA_TINY_VAE, latent_channels=latent))
    folder = work / "sana-layout-250m"
    if not (folder / "model_index.json").is_file():
        torch.manual_seed(0)
        transformer = transformer_class("sana").from_config(spec.transformer_config).eval()
        _randomize_zero_params(transformer, 0)
        vae_spec = replace(BUILTIN_SPECS["sana-tiny"], vae_config=spec.vae_config)
        save_pipeline_folder(spec, transformer, build_vae(vae_spec), folder)
    return str(folder)


LAYOUTS = {"flux": flux_folder, "sana": sana_folder, "tiny": lambda work: "flux-tiny"}   # tiny: a dry run


def plan_of(layout: str, folder: str) -> tuple[int, int]:
    if SPLITS[layout]:
        return SPLITS[layout]
    from ditskip_edge.memory_estimate.split import split_for_ratio
    from ditskip_edge.models.loading import resolve_spec
    c = resolve_spec(folder).transformer_config
    p = split_for_ratio(int(c["num_layers"]) + int(c.get("num_single_layers", 0)), 0.5)
    return p.n_front, p.n_back


def git_state() -> dict:
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.rstrip()
    return {"head": git("rev-parse", "--short", "HEAD"), "subject": git("log", "-1", "--format=%s").strip()[:120],
            "uncommitted": [ln[3:] for ln in git("status", "--short", "--untracked-files=no").splitlines()]}


# ------------------------------------------------------------------------------------------------ compile
def estimate(folder: str, n_front: int, n_back: int, px: int) -> dict:
    """The estimate of this bundle's layout and plan with no runtime overhead (the fixed cost is added later): the
    cache codec the bundle has, the photos the subject stage reads (their normalised sizes)."""
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    from ditskip_edge.memory_estimate.subject import photo_sizes_of
    from ditskip_edge.models.loading import resolve_spec
    photos = tuple(photo_sizes_of(PHOTOS, resolve_spec(folder).data_px))
    req = EstimateRequest(model=folder, skip_front=n_front, skip_back=n_back, precision="int8", rank=RANK,
                          steps=STEPS, grad_accum=GRAD_ACCUM, weights="mapped", backend="xnnpack", remat="blocks",
                          subject_stage=True, forward_precision="int8", generation_px=(px,),
                          generation_steps=GEN_STEPS, runtime_overhead_mib=0, cache_codec=CACHE_CODEC,
                          photo_sizes=photos)
    d = estimate_memory(req)
    g = d["generation"][str(px)]
    return {"request": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(req).items()},
            "train_bytes": d["memory"]["footprint_bytes"], "subject_bytes": d["subject_stage"]["footprint_bytes"],
            "generate_bytes": g["footprint_bytes"], "memory": d["memory"], "subject_stage": d["subject_stage"],
            "generation": g, "plan": d["plan"]}


def compile_layout(layout: str, work: Path) -> dict:
    from compiler.compile import CompileRequest, compile_bundle
    from export.executorch_stage import ExecutorchPrograms
    from export.executorch_subject import SubjectPrograms
    from export.generation_stage import GenerationPrograms
    from ditskip_edge.lora import LoraSpec
    from ditskip_edge.models.loading import build_transformer, resolve_spec
    from ditskip_edge.runtime.bundle import OptimizerSpec
    from ditskip_edge.runtime.schedule import ScheduleConfig
    folder = LAYOUTS[layout](work)
    spec = resolve_spec(folder)
    n_front, n_back = plan_of(layout, folder)
    out = work / f"{layout}-model"
    info_path = work / f"{layout}-compile.json"
    if (out / "manifest.json").is_file() and info_path.is_file():
        return json.loads(info_path.read_text())
    t0, c0 = time.perf_counter(), time.process_time()
    compile_bundle(CompileRequest(
        model=folder, images=None, prompt=PROMPT, out=str(out), n_front=n_front, n_back=n_back, overwrite=True,
        schedule=ScheduleConfig(steps=STEPS, grad_accum=GRAD_ACCUM, s_min_px=spec.train_px, s_max_px=spec.data_px,
                                multiple_px=spec.pixel_multiple, seed=0),
        lora=LoraSpec(rank=RANK, alpha=float(RANK)), optimizer=OptimizerSpec(lr=1e-3), cache_codec=CACHE_CODEC,
        programs=[ExecutorchPrograms(("int8",), backend="xnnpack", preprocess=False),
                  GenerationPrograms(("int8",))],
        subject_programs=SubjectPrograms("int8", external_weights=True)))
    compile_s, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
    m = json.loads((out / "manifest.json").read_text())
    gen_px = spec.train_px                           # GenerationPrograms' px default: the train resolution
    info = {"layout": layout, "folder": folder, "model_bundle": str(out), "plan": [n_front, n_back],
            "params_m": round(sum(p.numel() for p in build_transformer(spec, "meta").parameters()) / 1e6, 1),
            "train_px": spec.train_px, "data_px": spec.data_px, "generation_px": gen_px, "text_tokens": spec.text.seq_len,
            "compile_wall_s": round(compile_s, 1), "compile_cpu_s": round(compile_cpu, 1),
            "bundle_bytes": sum(f["bytes"] for f in m["files"].values()),
            "programs": [{k: p.get(k) for k in ("name", "precision", "path")}
                         | {"planned_arena_bytes": p.get("memory", {}).get("planned_arena_bytes")}
                         for p in m["programs"]],
            "git": git_state(), "cache_codec": CACHE_CODEC}
    info_path.write_text(json.dumps(info, indent=1, default=str))
    try:
        info["estimate_no_overhead"] = estimate(folder, n_front, n_back, gen_px)
    except Exception as e:   # noqa: BLE001 - keep the bundle; the estimate is redone when measured
        info["estimate_error"] = f"{type(e).__name__}: {e}"[:2000]
    info_path.write_text(json.dumps(info, indent=1, default=str))
    return info


# ------------------------------------------------------------------------------------------------ heap sites
_ALLOCATORS = ("malloc", "operator new", "heaptrack", "calloc", "realloc", "posix_memalign", "aligned_alloc", "__gnu",
               "std::__new", "_Znwm")


def heap_at_peak(zst: Path, depth: int = 3, top: int = 12) -> dict:
    """A heaptrack recording (the interpreted .zst: strings, instruction pointers, traces, allocation infos, +/-
    events, timestamps) read at the moment the heap is largest (within 0.1%): the live bytes grouped by the first
    `depth` named frames above the allocator."""
    import collections
    strings, ips, traces, infos = [None], [None], [None], []
    live, heap, best = collections.Counter(), 0, (0, 0.0, {})          # best: (heap, at s, its live set)
    now = 0.0
    p = subprocess.Popen(["zstdcat", str(zst)], stdout=subprocess.PIPE, text=True, errors="replace")
    for line in p.stdout:
        k = line[:1]
        if k == "s":
            parts = line.rstrip("\n").split(" ", 2)
            strings.append(parts[2] if len(parts) > 2 else "")
        elif k == "i":
            f = line.split()[1:]
            ips.append(int(f[2], 16) if len(f) > 2 else 0)
        elif k == "t":
            _, ip, parent = line.split()
            traces.append((int(ip, 16), int(parent, 16)))
        elif k == "a":
            _, size, tr = line.split()
            infos.append((int(size, 16), int(tr, 16)))
        elif k in "+-":
            i = int(line.split()[1], 16)
            live[i] += 1 if k == "+" else -1
            heap += infos[i][0] if k == "+" else -infos[i][0]
            if heap > best[0] * 1.001 + 4096:       # a new peak (by more than 0.1%): its live set, copied
                best = (heap, now, {i: c for i, c in live.items() if c})
        elif k == "c":
            now = int(line.split()[1], 16) / 1000.0
    p.wait()

    def sig(tr):
        names = []
        while tr and len(names) < depth:
            ip, tr = traces[tr]
            name = strings[ips[ip]] if ips[ip] else ""
            if name and not name.startswith(_ALLOCATORS):
                names.append(name.split("(")[0][:70])
        return " < ".join(names)
    sites = collections.Counter()
    for i, c in best[2].items():
        sites[sig(infos[i][1])] += infos[i][0] * c
    return {"heap_peak_bytes": sum(infos[i][0] * c for i, c in best[2].items()), "at_s": round(best[1], 2),
            "sites": [{"site": k, "bytes": n} for k, n in sites.most_common(top)]}


def heap_sites(args, work: Path) -> int:
    """--heap-sites: each layout's personalize and train under heaptrack (the allocator setting of the measured
    runs), the heap at its peak by call site -> OUT.{json,md}."""
    import shutil
    from _meta import provenance, write_result
    from device_tests.native_runtime import TARGETS
    binary = Path(args.binary) if args.binary else TARGETS["x86_64"][1]
    doc = {"provenance": provenance(), "binary": str(binary), "layouts": []}
    for layout in [x for x in args.layouts.split(",") if x]:
        info = json.loads((work / f"{layout}-compile.json").read_text())
        subject = work / f"{layout}-subject-heap"
        shutil.rmtree(subject, ignore_errors=True)
        rows = {}
        for stage in [s for s in ("personalize", "train") if s in args.stages.split(",")]:
            argv = stage_args("native", stage, Path(info["model_bundle"]), subject)
            rec = work / f"heap_{layout}_{stage}"
            r = subprocess.run(["heaptrack", "-o", str(rec), str(binary), *argv], capture_output=True, text=True,
                               env={**os.environ, "DITSKIP_PROGRESS": "0", **MALLOC_ENV}, timeout=3600)
            if r.returncode != 0:
                raise SystemExit(f"heaptrack {stage} exited {r.returncode}: {r.stderr[-800:]}")
            rows[stage] = {"command": f"heaptrack ditskip-run {' '.join(argv)}", **heap_at_peak(Path(f"{rec}.zst"))}
            print(f"{layout} {stage}: heap peak {rows[stage]['heap_peak_bytes'] / MIB:.2f} MiB at "
                  f"{rows[stage]['at_s']} s", file=sys.stderr, flush=True)
        doc["layouts"].append({"layout": layout, "stages": rows})
    write_result(doc, args.out, heap_markdown)
    return 0


def heap_markdown(doc: dict) -> str:
    from _meta import provenance_md
    lines = ["# The native stages' heap at its peak, by call site (heaptrack)", "", provenance_md(doc["provenance"]),
             f"Binary: `{doc['binary']}`. " + inspect_doc(heap_at_peak), ""]
    for L in doc["layouts"]:
        for stage, r in L["stages"].items():
            lines += [f"## {L['layout']}: {stage}", "", f"`{r['command']}`: heap {r['heap_peak_bytes'] / MIB:.2f} "
                      f"MiB at {r['at_s']} s.", "", "| MiB | allocated from |", "|---|---|"]
            lines += [f"| {x['bytes'] / MIB:.2f} | {x['site']} |" for x in r["sites"]]
            lines.append("")
    return "\n".join(lines) + "\n"


def inspect_doc(fn) -> str:
    import inspect
    return " ".join(inspect.cleandoc(fn.__doc__).split())


# ------------------------------------------------------------------------------------------------ measure
PY_CHILD = r"""
import json, sys, time
from device_tests.runtime_imports import forbid_host_modules
forbid_host_modules()
from ditskip_edge.runtime import bindings
bindings.executorch_training(); bindings.executorch_inference()
import torch
from ditskip_edge.runtime.__main__ import main
""" + __import__("_meta").PEAK_WATCHER + r"""
code = main(sys.argv[1:])
stop_watch()
print(json.dumps({"code": code, "baseline_anon_bytes": base.anon_bytes, "peak_anon_growth_bytes": peak["anon"],
                  "peak_file_growth_bytes": peak["file"]}))
"""


def native_has(runner, verb: str) -> bool:
    """Whether this build's ditskip-run runs `verb` (the stubs answer "not in the native core yet")."""
    from device_tests.native_runtime import run
    r = run(runner, verb, "--help", timeout=60)
    return "not in the native core yet" not in (r.stdout + r.stderr) and r.returncode in (0, 2)


def sampled(runner, args: list, env: dict) -> tuple:
    """measure() with the child's CPU seconds (this process's children's rusage around it: one child at a time)."""
    from device_tests.native_runtime import measure
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = measure(runner, *args, env=env, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return m, cpu


def thin_timeline(tl: list, keep: int = 400, around_s: float = 0.3) -> list:
    """About `keep` samples evenly spread, plus every sample within around_s of the RssAnon peak (a transient there
    stays visible)."""
    if not tl:
        return []
    t_peak = max(tl, key=lambda s: s[1])[0]
    step = max(1, len(tl) // keep)
    return [[round(t, 3), a, f] for i, (t, a, f) in enumerate(tl) if i % step == 0 or abs(t - t_peak) <= around_s]


def run_stage(runner, impl: str, argv: list) -> dict:
    """One stage in its own process: impl "native" (ditskip-run ARGV) or "python" (python -m ditskip_edge.runtime
    ARGV in a runtime-only child that reports its growth over its loaded baseline)."""
    from device_tests.native_runtime import Runner
    if impl == "native":
        m, cpu = sampled(runner, argv, MALLOC_ENV)
        summary, child = m.json, None
        cmd = "ditskip-run " + " ".join(map(str, argv))
    else:
        py = Runner("x86_64", Path(sys.executable))
        env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **MALLOC_ENV}
        m, cpu = sampled(py, ["-c", PY_CHILD, *argv], env)
        lines = m.stdout.strip().splitlines()
        child = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
        try:
            summary = json.loads("\n".join(lines[:-1])) if len(lines) > 1 else None
        except ValueError:
            summary = None
        cmd = "python -m ditskip_edge.runtime " + " ".join(map(str, argv))
    rec = {"impl": impl, "command": cmd, "returncode": m.returncode, "wall_s": round(m.wall_s, 2),
           "cpu_s": round(cpu, 2), "peak_anon_bytes": m.peak_anon_bytes, "peak_file_bytes": m.peak_file_bytes,
           "samples": len(m.timeline), "summary": summary, "python_child": child,
           "timeline": thin_timeline(m.timeline)}
    if m.timeline:
        t_peak = max(m.timeline, key=lambda s: s[1])[0]
        rec["peak_anon_at_s"] = round(t_peak, 3)
        # the highest RssAnon outside the last second of the process (what it holds while it works, without the
        # writes before exit) and within it
        body = [a for t, a, _ in m.timeline if t < m.wall_s - 1.0]
        rec["peak_anon_before_last_second_bytes"] = max(body) if body else None
    if m.returncode != 0:
        rec["stderr"] = m.stderr.strip()[-2000:]
    return rec


def stage_args(impl: str, stage: str, model: Path, subject: Path) -> list:
    if stage == "personalize":
        a = ["personalize", model, "--photos", PHOTOS, "--out", subject, "--no-train", "--json"]
    elif stage == "train":
        a = ["train", subject, "--steps", TRAIN_STEPS, "--no-resume", "--json"]
    else:
        a = ["generate", subject, "--prompt", PROMPT, "--seed", 0, "--steps", GEN_STEPS, "--precision", "int8",
             "--lora", subject / "runs" / "executorch" / "lora", "--out", subject / "generated.png", "--json"]
    if impl == "python" and stage in ("personalize", "train"):
        a[2:2] = ["--runtime", "executorch"] if stage == "train" else []
        if stage == "personalize":
            a.insert(-1, "--runtime")
            a.insert(-1, "executorch")
    return [str(x) for x in a]


STAGES = ("personalize", "train", "generate")


def per_unit(stage: str, rec: dict, info: dict) -> dict:
    """Seconds per subject-stage sample / training step / picture: the verb's own figure where its JSON has one,
    and the process's wall and CPU seconds divided by the units."""
    s = rec.get("summary") or {}
    units = {"personalize": STEPS * GRAD_ACCUM, "train": TRAIN_STEPS, "generate": 1}[stage]
    own = {"personalize": (s.get("subject_stage") or s).get("seconds_per_sample"),
           "train": s.get("seconds_per_step"), "generate": s.get("seconds")}[stage]
    return {"units": units, "unit": {"personalize": "sample", "train": "step", "generate": "picture"}[stage],
            "verb_s_per_unit": own, "process_wall_s_per_unit": round(rec["wall_s"] / units, 3),
            "process_cpu_s_per_unit": round(rec["cpu_s"] / units, 3)}


def measure_layout(layout: str, work: Path, runner, fixed: dict, impls: dict, python_too: bool,
                   stages: tuple = ()) -> dict:
    stages = stages or STAGES
    import shutil
    info = json.loads((work / f"{layout}-compile.json").read_text())
    # the estimate of this checkout (the one computed at compile, older code perhaps, is kept beside it)
    if "estimate_no_overhead" in info:
        info["estimate_at_compile"] = {k: info["estimate_no_overhead"][k]
                                       for k in ("train_bytes", "subject_bytes", "generate_bytes")}
    n_front, n_back = info["plan"]
    info["estimate_no_overhead"] = estimate(info["folder"], n_front, n_back, info["generation_px"])
    info["estimate_computed_at_measure"] = git_state()
    est = info["estimate_no_overhead"]
    model = Path(info["model_bundle"])
    runs = {}
    for label, impl_of in [("main", impls)] + ([("python", {s: "python" for s in STAGES})] if python_too else []):
        subject = work / f"{layout}-subject-{label}"
        shutil.rmtree(subject, ignore_errors=True)
        rows = {}
        for stage in [s for s in STAGES if s in stages]:
            impl = impl_of[stage]
            rec = run_stage(runner, impl, stage_args(impl, stage, model, subject))
            key = {"personalize": "subject_bytes", "train": "train_bytes", "generate": "generate_bytes"}[stage]
            rec["estimate_bytes"] = est[key] + fixed["rss_anon_bytes"]
            if impl == "native":
                rec["footprint_bytes"] = rec["peak_anon_bytes"]
                rec["counts"] = "whole native process"
            elif rec.get("python_child"):
                rec["footprint_bytes"] = rec["python_child"]["peak_anon_growth_bytes"] + fixed["rss_anon_bytes"]
                rec["counts"] = "Python runtime: growth over its loaded process + the native fixed cost"
            rec["measured_over_estimate"] = (round(rec["footprint_bytes"] / rec["estimate_bytes"], 3)
                                             if rec.get("footprint_bytes") else None)
            rec.update(per_unit(stage, rec, info))
            rows[stage] = rec
            print(f"{layout} {label} {stage} ({impl}): rc {rec['returncode']}, RssAnon "
                  f"{(rec.get('footprint_bytes') or 0) / MIB:.1f} MiB vs estimate {rec['estimate_bytes'] / MIB:.1f} "
                  f"({rec['measured_over_estimate']}), {rec['wall_s']} s wall, {rec['cpu_s']} s CPU"
                  + (f"; {rec.get('stderr', '')[-400:]}" if rec["returncode"] else ""), file=sys.stderr, flush=True)
            if rec["returncode"] != 0:
                break
        runs[label] = rows
    return {"layout": layout, "compile": info, "runs": runs}


def fixed_cost(runner) -> dict:
    m, cpu = sampled(runner, ["footprint", "--json"], MALLOC_ENV)
    if m.returncode != 0 or m.json is None:
        raise SystemExit(f"ditskip-run footprint exited {m.returncode}: {m.stderr.strip()[-800:]}")
    return {"rss_anon_bytes": m.json["rss_anon_bytes"], "rss_file_bytes": m.json["rss_file_bytes"],
            "sampled_peak_anon_bytes": m.peak_anon_bytes, "command": "ditskip-run footprint --json",
            "counts": m.json["counts"], "version": m.json["version"]}


def measure_all(args, work: Path) -> int:
    from _meta import provenance
    from device_tests.native_runtime import TARGETS, Runner
    prov = provenance()
    load0 = os.getloadavg()
    runner = Runner("x86_64", Path(args.binary) if args.binary else TARGETS["x86_64"][1])   # never rebuilt here
    fixed = fixed_cost(runner)
    impls = {s: ("native" if s == "train" or native_has(runner, s) else "python") for s in STAGES}
    print(f"fixed cost {fixed['rss_anon_bytes'] / MIB:.2f} MiB; stages: {impls}", file=sys.stderr, flush=True)
    doc = {"provenance": prov, "machine_note": f"{os.cpu_count()} CPU cores shared with other engineers' builds, "
           f"tests and runs", "load_average_at_start": [round(x, 2) for x in load0],
           "binary": {"path": str(runner.binary), "mtime_utc": time.strftime(
               "%Y-%m-%dT%H:%M:%SZ", time.gmtime(runner.binary.stat().st_mtime))},
           "git_at_measure": git_state(), "fixed_cost": fixed, "implementations": impls,
           "train_steps": TRAIN_STEPS, "gen_steps": GEN_STEPS, "layouts": [],
           "notes": Path(args.notes).read_text() if args.notes else None}
    for layout in [x for x in args.layouts.split(",") if x]:
        doc["layouts"].append(measure_layout(layout, work, runner, fixed, impls, args.python,
                                             tuple(x for x in args.stages.split(",") if x)))
        doc["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        from _meta import write_result
        write_result(doc, args.out, markdown)
    print(markdown(doc), file=sys.stderr)
    return 0


RUN_KEYS = ("provenance", "machine_note", "load_average_at_start", "load_average_at_end", "binary", "git_at_measure",
            "fixed_cost", "implementations")


def merge(args) -> int:
    """One result from several runs' JSONs: their layouts in order, each layout with its own run's provenance, load,
    binary, source state and fixed cost (`run`); the top-level fields are the last source's."""
    from _meta import provenance, write_result
    doc, sources = None, []
    for path in [p for p in args.merge.split(",") if p]:
        src = json.loads(Path(path).read_text())
        sources.append(f"{src['provenance']['command']} ({src['provenance']['date']})")
        for L in src["layouts"]:
            L.setdefault("run", {k: src.get(k) for k in RUN_KEYS})
        if doc is None:
            doc = src
        else:
            doc.update({k: v for k, v in src.items() if k != "layouts"})
            doc["layouts"] = doc["layouts"] + src["layouts"]
    prov = provenance()
    doc["provenance"] = dict(prov, command=prov["command"] + " <- " + "; ".join(sources))
    if args.notes:
        doc["notes"] = Path(args.notes).read_text()
    write_result(doc, args.out, markdown)
    return 0


def markdown(doc: dict) -> str:
    from _meta import provenance_md
    f = lambda b: "" if b is None else f"{b / MIB:.1f}"  # noqa: E731
    fx = doc["fixed_cost"]
    lines = ["# The device stages on the native core: whole-process footprint against the estimate", "",
             provenance_md(doc["provenance"]),
             f"Machine shared: {doc['machine_note']}; load average {doc['load_average_at_start'][0]} at start, "
             f"{doc.get('load_average_at_end', ['?'])[0]} at end (footprints do not depend on load; seconds do: CPU "
             f"seconds beside wall). Binary: `{doc['binary']['path']}` built {doc['binary']['mtime_utc']}; source "
             f"HEAD {doc['git_at_measure']['head']} ({doc['git_at_measure']['subject'][:70]}...)"
             + (f", uncommitted: {', '.join(doc['git_at_measure']['uncommitted'])}"
                if doc['git_at_measure']['uncommitted'] else "") + ".", "",
             "\n".join(__doc__.split("\n\n")[1:]).strip(), "",
             f"Fixed cost (`{fx['command']}`): RssAnon {fx['rss_anon_bytes'] / MIB:.2f} MiB, RssFile "
             f"{fx['rss_file_bytes'] / MIB:.1f} MiB; it is the estimate's runtime overhead in every row.", ""]
    for L in doc["layouts"]:
        c = L["compile"]
        run = L.get("run")
        if run:
            lines_run = [f"Run: `{run['provenance']['command']}` on {run['provenance']['date']}; load average "
                         f"{run['load_average_at_start'][0]} at start, {(run.get('load_average_at_end') or ['?'])[0]} "
                         f"at end; binary built {run['binary']['mtime_utc']}, source HEAD {run['git_at_measure']['head']}"
                         f"; fixed cost RssAnon {run['fixed_cost']['rss_anon_bytes'] / MIB:.2f} MiB.", ""]
        else:
            lines_run = []
        lines += [f"## {c['folder'].rsplit('/', 1)[-1]} ({c['params_m']}M transformer parameters; front "
                  f"{c['plan'][0]} / back {c['plan'][1]} skipped; {c['train_px']} px crops, {c['text_tokens']} text "
                  f"tokens; generation at {c['generation_px']} px)", "",
                  f"Model bundle: {c['bundle_bytes'] / MIB:.0f} MiB, compiled in {c['compile_wall_s']} s wall / "
                  f"{c['compile_cpu_s']} s CPU (HEAD {c['git']['head']}"
                  + (f", uncommitted: {', '.join(c['git']['uncommitted'])}" if c['git']['uncommitted'] else "")
                  + f"; cache codec {c.get('cache_codec', CACHE_CODEC)}).", "", *lines_run,
                  "| run | stage | runs on | RssAnon MiB | estimate MiB | measured / estimate | RssAnon peak at s "
                  "(of wall) | RssAnon before the last second MiB | RssFile MiB | s / unit (verb's own) | "
                  "wall s / unit | CPU s / unit |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, rows in L["runs"].items():
            for stage, r in rows.items():
                ok = r["returncode"] == 0
                ratio = r.get("measured_over_estimate")
                flag = "" if ratio is None or 0.9 <= ratio <= 1.1 else " (outside 10%)"
                on = ("ditskip-run (whole process)" if r["impl"] == "native" else
                      "Python runtime (growth over loaded process + fixed cost)")
                lines.append(f"| {label} | {stage} | {on} | "
                             f"{f(r.get('footprint_bytes')) if ok else 'failed rc %d' % r['returncode']} | "
                             f"{f(r['estimate_bytes'])} | {'' if ratio is None else f'{ratio:.2f}'}{flag} | "
                             f"{r.get('peak_anon_at_s', '')} ({r['wall_s']}) | "
                             f"{f(r.get('peak_anon_before_last_second_bytes')) if r['impl'] == 'native' else '-'} | "
                             f"{f(r['peak_file_bytes'])} | {r['verb_s_per_unit']} per {r['unit']} | "
                             f"{r['process_wall_s_per_unit']} | {r['process_cpu_s_per_unit']} |")
        e = c.get("estimate_no_overhead") or {}
        if e:
            mem, st, g = e["memory"], e["subject_stage"], e["generation"]
            lines += ["", "Estimate terms (no overhead; MiB): training = LoRA "
                      f"{mem['lora_params_bytes'] / MIB:.1f} + AdamW {mem['adamw_states_bytes'] / MIB:.1f} + grad sums "
                      f"{mem['gradient_sums_bytes'] / MIB:.1f} + arena {mem['activation_arena_bytes'] / MIB:.1f} + "
                      f"inputs {mem['step_inputs_bytes'] / MIB:.1f} + program state "
                      f"{mem['program_state_bytes'] / MIB:.1f} + program inputs "
                      f"{mem.get('program_inputs_bytes', 0) / MIB:.1f} + XNNPACK workspace "
                      f"{mem.get('xnnpack_workspace_bytes', 0) / MIB:.1f}; subject stage = photos "
                      f"{st.get('photo_bytes', 0) / MIB:.1f} ({st.get('photos', '?')}) + text "
                      f"{st.get('text_conditioning_bytes', 0) / MIB:.1f} + the largest of the phases "
                      + ", ".join(f"{k} {v / MIB:.1f}" for k, v in st.get('phase_peaks_bytes', {}).items())
                      + f"; generation: transformer phase {f(g.get('transformer_phase_bytes'))}, decoder "
                      f"{f(g.get('decoder_bytes'))}, text {f(g.get('text_phase_bytes'))}."]
        lines.append("")
    if doc.get("notes"):
        lines += ["## Notes", "", doc["notes"].strip(), ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layouts", default="flux", help="comma-separated among flux, sana")
    ap.add_argument("--work", default="/work/native_stages", help="the layouts' folders and bundles (kept)")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--binary", default=None, help="the ditskip-run to measure (default: this checkout's build)")
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated among " + ", ".join(STAGES))
    ap.add_argument("--python", action="store_true", help="also the three stages through the Python runtime")
    ap.add_argument("--notes", default=None, help="a markdown file: the reading of the results, appended as Notes")
    ap.add_argument("--merge", default="", help="comma-separated result JSONs (one layout each, say): write OUT from "
                                                "their layouts, each with its run's provenance, measuring nothing")
    ap.add_argument("--remarkdown", action="store_true", help="rewrite OUT.md from OUT.json (and --notes), measuring "
                                                              "nothing")
    ap.add_argument("--out", default=str(RESULTS / "native_stages"))
    ap.add_argument("--heap-sites", action="store_true", help="personalize and train under heaptrack: the heap at "
                                                                  "its peak by call site (OUT.{json,md})")
    args = ap.parse_args()
    if args.heap_sites:
        return heap_sites(args, Path(args.work))
    if args.merge:
        return merge(args)
    if args.remarkdown:
        from _meta import write_result
        doc = json.loads(Path(args.out + ".json").read_text())
        if args.notes:
            doc["notes"] = Path(args.notes).read_text()
        write_result(doc, args.out, markdown)
        return 0
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DITSKIP_PROGRESS", "0")
    import torch
    torch.set_num_threads(1)
    for layout in [x for x in args.layouts.split(",") if x]:
        t0 = time.perf_counter()
        info = compile_layout(layout, work)
        print(f"{layout}: compiled {info['model_bundle']} ({info['compile_wall_s']} s wall, "
              f"{info['bundle_bytes'] / MIB:.0f} MiB) [{time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
        est = info.get("estimate_no_overhead") or {}
        print(json.dumps({k: est.get(k) for k in ("train_bytes", "subject_bytes", "generate_bytes")}
                         | {"estimate_error": info.get("estimate_error")}), file=sys.stderr, flush=True)
    if args.compile_only:
        return 0
    return measure_all(args, work)


if __name__ == "__main__":
    sys.exit(main())
