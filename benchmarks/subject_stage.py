"""Benchmark: the subject stage on the device (issue 15) against the host, and the cache-free mode's cost.

    PYTHONPATH=. nice python benchmarks/subject_stage.py [--models flux-tiny,sana-tiny] [--steps 10 --grad-accum 2]
    -> benchmarks/results/subject_stage.{json,md}

Per model (tiny configs, front 1 / back 2 of 6 blocks; fp32 training and forward programs, fp32 cache codec: the
equality criteria are fp32's):
1. the host-compiled subject bundle, and model bundles (no photos) with three kinds of forward programs: xnnpack (the
   default: embed, blocks and encoder on XNNPACK, weights inside the .pte), portable (portable kernels, XNNPACK
   encoder) and, for flux-tiny, portable with the weights in .ptd data files (memory-mapped, file-backed);
2. for each: the subject stage in a runtime-only child process (device_tests, uncapped, `--no-train`), one block
   program at a time and with every block program kept loaded: seconds per sample and the footprint (RssAnon above
   the child's baseline: interpreter + runtime libraries imported, no bundle);
3. training the device's subject bundle in a runtime-only child (footprint, seconds per step), and the cache-free
   subject bundle (residuals computed each step first; blocks dropped or kept between steps): step time ratio;
4. residuals per stream, device vs host (relative L2, max over the samples), and the losses of a run from the device
   cache vs the host bundle's run (ExecuTorch, same training program);
5. `--headline int8,...`: the subject stage vs training at a ~300M FLUX layout (no host comparison);
6. the planner (`ditskip-edge estimate --subject-stage`) for FLUX.1-dev and SANA-1600M: the subject stage's footprint
   vs training's (SANA-1600M also with the encoder on 256-px tiles), the cache-free mode's storage saved, footprint and
   extra TFLOPs per step.
Tests never time things; this script does (2 shared CPU cores: see the load average in the results).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

MIB = 1 << 20
PHOTOS = ROOT / "examples" / "photos"


def compile_model(model: str, work: Path, steps: int, accum: int, backend: str, external: bool) -> tuple[Path, float]:
    from conftest import compile_tiny
    from export.executorch_stage import ExecutorchPrograms
    from export.executorch_subject import SubjectPrograms
    out = work / f"{model}-model-{backend}{'-ptd' if external else ''}"
    t0 = time.perf_counter()
    if not out.exists():
        compile_tiny(out, model, steps=steps, grad_accum=accum, images=None, cache_codec="fp32",
                     programs=[ExecutorchPrograms(("fp32",), preprocess=False)],
                     subject_programs=SubjectPrograms("fp32", backend=backend, external_weights=external))
    return out, time.perf_counter() - t0


def compile_host(model: str, work: Path, steps: int, accum: int) -> tuple[Path, float]:
    from conftest import compile_tiny
    from export.executorch_stage import ExecutorchPrograms
    out = work / f"{model}-host"
    t0 = time.perf_counter()
    if not out.exists():
        compile_tiny(out, model, steps=steps, grad_accum=accum, cache_codec="fp32",
                     programs=[ExecutorchPrograms(("fp32",), preprocess=False)])
    return out, time.perf_counter() - t0


def child(bundle: Path, run_dir: Path, **kw) -> dict:
    from device_tests.runner import run_device
    run = run_device(bundle, "executorch", run_dir, uncapped=True, resume=False, timeout_s=3600, **kw)
    if run.status != "ok":
        raise SystemExit(f"device run failed: {run.status}: {run.message}")
    r = run.result
    return {"footprint_above_baseline_bytes": run.footprint_above_baseline_bytes,
            "baseline_anon_bytes": run.baseline_anon_bytes, "peak_file_bytes": run.peak_file_bytes,
            "seconds": r.get("seconds"), "subject_stage": r.get("subject_stage"), "summary": r.get("summary")}


def residual_errors(device: Path, host: Path) -> dict:
    import numpy as np
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.codecs import decode_entry

    def entries(path):
        c = Bundle.open(path).cache()
        return [{"x0": e["x0"], **decode_entry(c.codec, e, c.shapes)} for e in map(c.read_encoded, range(len(c)))]
    worst = {}
    for d, h in zip(entries(device), entries(host)):
        for k in h:
            rel = float(np.linalg.norm((d[k] - h[k]).ravel()) / np.linalg.norm(h[k].ravel()))
            worst[k] = max(worst.get(k, 0.0), rel)
    return worst


def losses(bundle: Path, run_dir: Path) -> list[float]:
    from ditskip_edge.runtime.loop import RunConfig
    from ditskip_edge.runtime.run import train_bundle
    return train_bundle(bundle, "executorch", RunConfig(run_dir=run_dir, progress=False, resume=False))["losses"]


COMPUTED_MODES = ("cache-free", "x0-only")      # the cache modes whose steps compute their residuals first
KEEP_WORDS = {False: "one block at a time", True: "blocks kept loaded"}
COMPUTED_RUNS = [(m, k) for m in COMPUTED_MODES for k in KEEP_WORDS]


def mode_key(mode: str, keep: bool) -> str:
    return f"{mode}_{KEEP_WORDS[keep]}".replace("-", "_").replace(" ", "_")


def computed_row(run: dict, stored: dict) -> dict:
    """A computed-residual run's step time, footprint and losses against the stored-cache run's (child() results)."""
    s, t = run["summary"], stored["summary"]
    return {"seconds_per_step": s["seconds_per_step"],
            "footprint_above_baseline_bytes": run["footprint_above_baseline_bytes"],
            "step_time_ratio_to_stored": round(s["seconds_per_step"] / t["seconds_per_step"], 2),
            "max_rel_loss_diff_to_stored": max(abs(a - b) / abs(b) for a, b in zip(s["losses"], t["losses"]))}


def measure_model(model: str, work: Path, steps: int, accum: int, only: tuple[str, ...] = ()) -> dict:
    """Variants of the forward programs: xnnpack (the default: blocks and encoder on XNNPACK, weights inside the
    .pte), portable (portable kernels, XNNPACK encoder), and for flux-tiny portable with the weights in .ptd data
    files (memory-mapped, file-backed). Each: the subject stage one block program at a time and with all kept."""
    row: dict = {"model": model, "plan": "front 1 / back 2 of 6", "steps": steps, "grad_accum": accum,
                 "samples": steps * accum, "variants": {}}
    host, t_host = compile_host(model, work, steps, accum)
    row["compile_host_bundle_s"] = round(t_host, 1)
    variants = [("xnnpack", False), ("portable", False)] + ([("portable", True)] if model.startswith("flux") else [])
    if only:
        variants = [(b, e) for b, e in variants if b + ("+ptd" if e else "") in only]
    for backend, external in variants:
        name = backend + ("+ptd" if external else "")
        mb, t_model = compile_model(model, work, steps, accum, backend, external)
        v: dict = {"compile_model_bundle_s": round(t_model, 1), "stage": {}}
        for keep in (False, True):
            out = work / f"{model}-device-{name}-{'keep' if keep else 'drop'}"
            r = child(mb, work / f"run-stage-{model}-{name}-{keep}", photos=PHOTOS, subject_out=out, no_train=True,
                      keep_blocks=keep, overwrite=True)
            st = r["subject_stage"]
            v["stage"]["blocks_kept_loaded" if keep else "one_block_at_a_time"] = {
                "seconds_per_sample": st["seconds_per_sample"],
                "footprint_above_baseline_bytes": r["footprint_above_baseline_bytes"],
                "peak_file_bytes": r["peak_file_bytes"], "baseline_anon_bytes": r["baseline_anon_bytes"]}
            dev = out
        v["residual_rel_error_device_vs_host"] = residual_errors(dev, host)
        train = child(dev, work / f"run-train-{model}-{name}")
        v["training"] = {"seconds_per_step": train["summary"]["seconds_per_step"],
                         "footprint_above_baseline_bytes": train["footprint_above_baseline_bytes"],
                         "peak_file_bytes": train["peak_file_bytes"]}
        for mode, keep in COMPUTED_RUNS:
            free = work / f"{model}-{mode}-{name}"
            r = child(mb, work / f"run-{mode}-{model}-{name}-{keep}", photos=PHOTOS, subject_out=free,
                      cache_mode=mode, overwrite=True, keep_blocks=keep)
            v[mode_key(mode, keep)] = computed_row(r, train)
        v["stage_footprint_le_training"] = (v["stage"]["one_block_at_a_time"]["footprint_above_baseline_bytes"]
                                            <= v["training"]["footprint_above_baseline_bytes"])
        if backend == "portable" and not external:
            a, b = losses(dev, work / f"loss-dev-{model}"), losses(host, work / f"loss-host-{model}")
            row["losses_device_cache"], row["losses_host_bundle"] = a, b
            row["max_rel_loss_diff_device_vs_host"] = max(abs(x - y) / abs(y) for x, y in zip(a, b))
        row["variants"][name] = v
        print(f"{model} {name}: {json.dumps(v, default=str)}", file=sys.stderr, flush=True)
    return row


def headline_spec():
    """A FLUX layout at about 300M parameters (memory_speed.py's headline FLUX: 4 double + 8 single blocks, width
    1024, 128 text tokens of 4096), random weights, the tiny autoencoder and the hash text encoder (no downloads), so
    the compiler can build a model bundle of it."""
    from dataclasses import replace

    from ditskip_edge.models.specs import _FLUX_TINY_VAE, BUILTIN_SPECS, TextSpec
    flux = BUILTIN_SPECS["flux-dev"]
    spec = replace(flux, name="flux-layout-300m",
                   transformer_config=dict(flux.transformer_config, num_layers=4, num_single_layers=8,
                                           num_attention_heads=8, attention_head_dim=128),
                   vae_config=dict(_FLUX_TINY_VAE), text=TextSpec("hash", seq_len=128, dim=4096, pooled_dim=768),
                   data_px=256, train_px=128)
    BUILTIN_SPECS[spec.name] = spec
    return spec


def measure_headline(work: Path, precision: str, external: bool) -> dict:
    """Footprint of the subject stage vs training's at the headline layout (no host comparison: no fp32 criteria)."""
    from conftest import compile_tiny
    from export.executorch_stage import ExecutorchPrograms
    from export.executorch_subject import SubjectPrograms
    spec = headline_spec()
    mb = work / f"headline-model-{precision}{'-ptd' if external else ''}"
    t0 = time.perf_counter()
    if not mb.exists():
        compile_tiny(mb, spec.name, n_front=4, n_back=2, steps=4, grad_accum=2, images=None,
                     programs=[ExecutorchPrograms((precision,), backend="xnnpack", preprocess=False)],
                     subject_programs=SubjectPrograms(precision, external_weights=external))
    t_compile = time.perf_counter() - t0
    out = work / f"headline-device-{precision}{'-ptd' if external else ''}"
    stage = child(mb, work / f"run-headline-stage-{precision}-{external}", photos=PHOTOS, subject_out=out,
                  no_train=True, overwrite=True)
    train = child(out, work / f"run-headline-train-{precision}-{external}")
    m = json.loads((mb / "manifest.json").read_text())
    block_bytes = [sum(m["files"][f]["bytes"] for f in [p["path"], *p["data"]]) for p in m["programs"]
                   if p["name"] == "block"]
    st = stage["subject_stage"]
    computed = {}
    for mode, keep in COMPUTED_RUNS:     # residuals computed each step
        r = child(mb, work / f"run-headline-{mode}-{precision}-{external}-{keep}", photos=PHOTOS,
                  subject_out=work / f"headline-{mode}-{precision}{'-ptd' if external else ''}", cache_mode=mode,
                  overwrite=True, keep_blocks=keep)
        computed[mode_key(mode, keep)] = {"mode": mode, "keep_blocks": keep, **computed_row(r, train)}
    return {"model": spec.name, "params_m": None, "plan": "front 4 / back 2 of 12", "precision": precision,
            "weights": "mapped .ptd" if external else "in the .pte", "training_program": "XNNPACK, block remat",
            "compile_model_bundle_s": round(t_compile, 1),
            "largest_block_program_bytes": max(block_bytes), "block_programs_bytes": sum(block_bytes),
            "subject_stage": {"seconds_per_sample": st["seconds_per_sample"],
                              "footprint_above_baseline_bytes": stage["footprint_above_baseline_bytes"],
                              "peak_file_bytes": stage["peak_file_bytes"]},
            "training": {"seconds_per_step": train["summary"]["seconds_per_step"],
                         "footprint_above_baseline_bytes": train["footprint_above_baseline_bytes"],
                         "peak_file_bytes": train["peak_file_bytes"]},
            "stage_footprint_le_training": stage["footprint_above_baseline_bytes"]
            <= train["footprint_above_baseline_bytes"], "computed_residuals": computed}


def planner_rows() -> list[dict]:
    from ditskip_edge.memory_estimate.request import EstimateRequest, estimate_memory
    rows = []
    for model, ratio, precision, weights, tile in [("flux-dev", 0.5, "int8", "resident", None),
                                                   ("flux-dev", 0.5, "int8", "mapped", None),
                                                   ("flux-dev", 0.5, "int4", "resident", None),
                                                   ("sana-1600m", 0.5, "int8", "resident", None),
                                                   ("sana-1600m", 0.5, "int4", "resident", None),
                                                   ("sana-1600m", 0.5, "int8", "mapped", None),
                                                   ("sana-1600m", 0.5, "int8", "mapped", 256),
                                                   ("sana-1600m", 0.5, "int8", "mapped", "256-stages"),
                                                   ("sana-1600m", 0.5, "int8", "mapped", "256-portable")]:
        px = int(str(tile).split("-")[0]) if tile else None
        d = estimate_memory(EstimateRequest(model=model, skip_ratio=ratio, precision=precision, weights=weights,
                                            subject_stage=True, encode_tile_px=px,
                                            encode_backend="portable" if str(tile).endswith("portable") else "xnnpack",
                                            encode_stages=str(tile).endswith("stages")))
        s, c, x = d["subject_stage"], d["cache_free"], d["x0_only"]
        rows.append({"model": model, "skip_ratio": ratio, "precision": precision, "weights": weights,
                     "encode_tile_px": px, "encode_backend": s["encode_backend"],
                     "encode_stages": (s.get("encode_stages") or {}).get("stages", 1),
                     "plan": [d["plan"]["n_front"], d["plan"]["n_back"]],
                     "training_footprint_gib": d["memory"]["footprint_gib"],
                     "subject_footprint_gib": s["footprint_gib"], "no_larger_than_training": s["no_larger_than_training"],
                     "subject_phase_peaks_bytes": s["phase_peaks_bytes"],
                     "largest_block_weights_gib": round(s["largest_block_weights_bytes"] / 2 ** 30, 3),
                     "subject_tflops_per_sample": s["tflops_per_sample"], "train_tflops_per_sample": d["tflops_per_sample"],
                     "stored_cache_gib": c["stored_cache_gib"], "cache_codec": c["codec"],
                     "cache_free_footprint_gib": c["footprint_gib"], "extra_tflops_per_step": c["extra_tflops_per_step"],
                     "predicted_step_time_ratio": c["predicted_step_time_ratio"], "remat": d["step"]["remat"],
                     "x0_only_cache_gib": x["stored_cache_gib"],
                     "x0_only_predicted_step_time_ratio": x["predicted_step_time_ratio"]})
        print(f"planner {model} {precision} {weights} tiles {tile}: subject {s['footprint_gib']} GiB vs training "
              f"{d['memory']['footprint_gib']} GiB", file=sys.stderr, flush=True)
    return rows


def markdown(res: dict) -> str:
    f = lambda b: f"{b / MIB:.1f}"  # noqa: E731
    lines = ["# The subject stage on the device, and the cache-free mode", "",
             f"- command: `{res['command']}`; date {res['date_utc']} UTC; machine: {res['machine']}",
             "- footprint = RssAnon (dirty anonymous memory: what a phone counts) of a runtime-only child process "
             "(device_tests, import guard, uncapped) above its baseline (interpreter + runtime libraries imported, no "
             "bundle); time = wall seconds on 2 CPU cores shared with other jobs (load average in the header): "
             "ratios within a row are more telling than the absolute figures", ""]
    for r in res["models"]:
        lines += [f"## {r['model']} ({r['plan']}, {r['samples']} samples, fp32 programs and cache)", "",
                  "| forward programs | subject stage | s / sample | footprint MiB | peak RssFile MiB |",
                  "|---|---|---|---|---|"]
        for name, v in r["variants"].items():
            for mode, st in v["stage"].items():
                lines.append(f"| {name} | {mode} | {st['seconds_per_sample']} | "
                             f"{f(st['footprint_above_baseline_bytes'])} | {f(st['peak_file_bytes'])} |")
        lines += ["", "| forward programs | training run | s / step | ratio to stored | footprint MiB | losses vs "
                      "stored (max rel.) |", "|---|---|---|---|---|---|"]
        for name, v in r["variants"].items():
            t = v["training"]
            lines.append(f"| {name} | from the device's stored cache | {t['seconds_per_step']} | 1 | "
                         f"{f(t['footprint_above_baseline_bytes'])} | |")
            for mode, keep in COMPUTED_RUNS:
                c = v.get(mode_key(mode, keep))
                if c is None:                  # results written before the x0-only mode existed
                    continue
                lines.append(f"| {name} | {mode}, {KEEP_WORDS[keep]} | {c['seconds_per_step']} | "
                             f"**{c['step_time_ratio_to_stored']}x** | {f(c['footprint_above_baseline_bytes'])} | "
                             f"{c['max_rel_loss_diff_to_stored']:.1e} |")
        lines.append("")
        for name, v in r["variants"].items():
            lines.append(f"- {name}: subject stage footprint (one block at a time) <= training's: "
                         f"**{v['stage_footprint_le_training']}**; residuals device vs host (relative L2, max over "
                         "samples): " + ", ".join(f"{k} {e:.1e}" for k, e in v["residual_rel_error_device_vs_host"]
                                                  .items()) + f"; compile {v['compile_model_bundle_s']} s")
        if "max_rel_loss_diff_device_vs_host" in r:
            lines += [f"- losses, a run from the device cache (portable forward programs) vs the host bundle's run: "
                      f"max rel. diff **{r['max_rel_loss_diff_device_vs_host']:.1e}** over "
                      f"{len(r['losses_host_bundle'])} steps; host subject bundle compile {r['compile_host_bundle_s']} s"]
        lines.append("")
    if res.get("headline"):
        lines += ["## Headline layout (FLUX layout, ~300M parameters, random weights; 128 px crops, 128 text tokens)",
                  "", "| precision | forward weights | training program | largest block program MiB | subject stage s / "
                  "sample | subject stage footprint MiB | training s / step | training footprint MiB | stage <= training |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for h in res["headline"]:
            lines.append(f"| {h['precision']} | {h['weights']} | {h.get('training_program', 'portable, block remat')} | "
                         f"{f(h['largest_block_program_bytes'])} | "
                         f"{h['subject_stage']['seconds_per_sample']} | "
                         f"{f(h['subject_stage']['footprint_above_baseline_bytes'])} | "
                         f"{h['training']['seconds_per_step']} | {f(h['training']['footprint_above_baseline_bytes'])} | "
                         f"**{h['stage_footprint_le_training']}** |")
        lines.append("")
        rows = [(h, mode, c) for h in res["headline"] for mode, c in h.get("computed_residuals", {}).items()]
        if rows:
            lines += ["| precision | forward weights | training run | s / step | ratio to stored | footprint MiB | "
                      "losses vs stored (max rel.) |", "|---|---|---|---|---|---|---|"]
            for h, key, c in rows:
                lines.append(f"| {h['precision']} | {h['weights']} | {c.get('mode', key)}, "
                             f"{KEEP_WORDS[c.get('keep_blocks', True)]} | "
                             f"{c['seconds_per_step']} | **{c['step_time_ratio_to_stored']}x** | "
                             f"{f(c['footprint_above_baseline_bytes'])} | {c['max_rel_loss_diff_to_stored']:.1e} |")
            lines.append("")
    if not res["planner"]:
        return "\n".join(lines) + "\n"
    lines += ["## Planner at real scale (`ditskip-edge estimate --model M --skip-ratio 0.5 --precision P --weights W "
              "--subject-stage [--encode-tile-px T] [--encode-stages] [--encode-backend B] --json`)", "",
              "The encoder's weights count as anonymous with the XNNPACK encoder (it packs them into its own memory, "
              "mapped or not: `encode_tiles.md`); with the portable encoder mapped weights stay file-backed; with the "
              "encoder one program per stage (`--encode-stages`) one stage's weights at a time.", "",
              "| model | precision | weights | encoder: tiles px, backend, programs | plan | training footprint GiB | subject stage footprint GiB | <= training | "
              "largest block GiB | subject TFLOP/sample | train TFLOP/sample | stored cache GiB (2000 samples) | "
              "cache-free footprint GiB | extra TFLOP/step (x4 samples) | predicted step time ratio: cache-free | "
              "x0-only cache GiB | predicted step time ratio: x0-only |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in res["planner"]:
        lines.append(f"| {p['model']} | {p['precision']} | {p['weights']} | {p.get('encode_tile_px') or 'whole crop'}, {p.get('encode_backend', 'xnnpack')}, "
                     f"{'%d stages' % p['encode_stages'] if p.get('encode_stages', 1) > 1 else 'one'} | "
                     f"{p['plan']} | {p['training_footprint_gib']} | "
                     f"{p['subject_footprint_gib']} | {p['no_larger_than_training']} | {p['largest_block_weights_gib']} | "
                     f"{p['subject_tflops_per_sample']} | {p['train_tflops_per_sample']} | {p['stored_cache_gib']} | "
                     f"{p['cache_free_footprint_gib']} | {p['extra_tflops_per_step']} | {p['predicted_step_time_ratio']} | "
                     f"{p.get('x0_only_cache_gib', '-')} | {p.get('x0_only_predicted_step_time_ratio', '-')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="flux-tiny,sana-tiny")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument("--work", default=None, help="keep the bundles here (default: a temporary folder)")
    ap.add_argument("--no-planner", action="store_true")
    ap.add_argument("--variants", default="", help="only these forward-program variants (comma-separated among "
                                                   "xnnpack, portable, portable+ptd; default all)")
    ap.add_argument("--out", default="subject_stage", help="results file stem under benchmarks/results/")
    ap.add_argument("--headline", default="", help="also the ~300M FLUX layout: comma-separated variants among "
                                                   "int8, int8-ptd, fp32, fp32-ptd")
    a = ap.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="subject-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DITSKIP_PROGRESS", "0")
    load = os.getloadavg()
    res = {"command": "PYTHONPATH=. python benchmarks/subject_stage.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
           "date_utc": started, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average "
                                          f"{load[0]:.1f} at start", "models": [], "planner": []}
    for m in [x for x in a.models.split(",") if x]:
        res["models"].append(measure_model(m, work, a.steps, a.grad_accum,
                                           tuple(v for v in a.variants.split(",") if v)))
        print(json.dumps(res["models"][-1], indent=1, default=str), file=sys.stderr, flush=True)
    res["headline"] = []
    for v in [x for x in a.headline.split(",") if x]:
        res["headline"].append(measure_headline(work, v.split("-")[0], v.endswith("-ptd")))
        print(json.dumps(res["headline"][-1], indent=1), file=sys.stderr, flush=True)
    if not a.no_planner:
        res["planner"] = planner_rows()
    res["load_average_at_end"] = os.getloadavg()[0]
    out = ROOT / "benchmarks" / "results" / a.out
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    out.with_suffix(".md").write_text(markdown(res))
    print(f"wrote {out}.json / .md", file=sys.stderr)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
