"""This machine's throughput for the training program's kernels: GFLOP/s of the ExecuTorch training step (XNNPACK and
portable programs) and of ExecuTorch's XNNPACK fp32 GEMM kernel alone, the figures `ditskip-edge estimate` turns
FLOPs into time with (ditskip_edge/memory_estimate/timing.py: HOST_*).

    python benchmarks/throughput.py --from benchmarks/results/device_footprint_headline_xnnpack.json,\
benchmarks/results/device_footprint_headline_portable.json
    -> benchmarks/results/throughput.{json,md}

- Step programs: the records of benchmarks/device_footprint.py (rows et_remat / native_remat: the headline
  layouts' training program, BlockSkip 50%, int8, block remat, mapped weights, 1 thread for the Python row; each
  record's backend is its export_config's), CPU seconds per step as measured there; FLOPs per step counted here on
  the same step (ditskip_edge/memory_estimate: memory.trace_step with the block remat, so the recomputed forward
  counts: FlopCounterMode, matmuls / convolutions / attention only, as benchmarks/memory_speed.py counts).
  GFLOP/s = FLOPs / CPU seconds (CPU seconds, not wall: this machine's 2 cores are shared).
- GEMM kernel: one nn.Linear [--gemm-n x K] @ [K x O]^T lowered to XNNPACK, run by ExecuTorch's Python bindings on 1
  thread, median of --gemm-runs calls, FLOPs 2 N K O per call; the program's efficiency = step GFLOP/s / GEMM GFLOP/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"


def step_flops(config: str, rank: int) -> dict:
    """FLOPs of one step of the device_footprint program (remat blocks: recomputed forward included) and without
    remat, on the memory estimate's fake-tensor trace."""
    from device_footprint import step_cfg
    from memory_speed import config_specs

    from ditskip_edge.memory_estimate.memory import trace_step
    spec = config_specs("headline")[config]
    cfg = step_cfg(spec, rank)
    out = {}
    for remat in ("blocks", "none"):
        out[remat] = trace_step(replace(cfg, remat=remat), attention="math", count_flops=True).flops
    return out


def step_profile_rows(doc: dict) -> list[dict]:
    """benchmarks/step_profile.py's `base` variant (the default training program, XNNPACK, remat blocks) as
    device_footprint rows: the Python bindings' 1-thread CPU seconds as et_remat, the native core's as native_remat."""
    rows = []
    for r in doc["records"]:
        if r.get("variant") != "base" or "cpu_seconds_per_step" not in r:
            continue
        common = {"config": r["config"], "export_config": {"backend": "xnnpack"}, "provenance": doc["provenance"]}
        rows.append({**common, "row": "et_remat", "cpu_seconds_per_step": r["cpu_seconds_per_step"],
                     "seconds_per_step": r.get("seconds_per_step", r["cpu_seconds_per_step"])})
        n = r.get("native") or {}
        if "cpu_seconds_per_step" in n:
            rows.append({**common, "row": "native_remat", "cpu_seconds_per_step": n["cpu_seconds_per_step"],
                         "seconds_per_step": n.get("seconds_per_step", n["cpu_seconds_per_step"])})
    return rows


def gemm_gflops(n: int, k: int, o: int, runs: int) -> dict:
    """ExecuTorch's XNNPACK fp32 GEMM (one linear, weights constant), 1 thread."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.extension.pybindings.portable_lib import (_load_for_executorch_from_buffer,
                                                               _unsafe_reset_threadpool)
    torch.manual_seed(0)
    lin = torch.nn.Linear(k, o, bias=False).eval()
    x = torch.randn(n, k)
    ep = torch.export.export(lin, (x,))
    prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    _unsafe_reset_threadpool(1)
    torch.set_num_threads(1)
    m = _load_for_executorch_from_buffer(prog.buffer)
    m.forward((x,))
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        m.forward((x,))
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    flops = 2 * n * k * o
    med = sorted(cpu)[len(cpu) // 2]
    return {"shape": [n, k, o], "flops": flops, "runs": runs, "cpu_seconds_median": med,
            "wall_seconds_median": sorted(wall)[len(wall) // 2], "gflops": round(flops / med / 1e9, 2)}


def main() -> None:
    from _meta import provenance, provenance_md, write_result
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="sources", required=True,
                    help="comma-separated benchmarks/device_footprint.py result JSONs (headline configs), or "
                    "benchmarks/step_profile.py's (its `base` rows)")
    ap.add_argument("--rows", default="et_remat,native_remat")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--gemm-n", type=int, default=512)
    ap.add_argument("--gemm-k", type=int, default=2048)
    ap.add_argument("--gemm-o", type=int, default=2048)
    ap.add_argument("--gemm-runs", type=int, default=7)
    ap.add_argument("--estimates", default="", help="comma-separated `ditskip-edge estimate --subject-stage "
                    "--generation-px PX --json` outputs (MODEL=PATH): their time section again with the throughput "
                    "measured here, as a table (the README's minutes to personalize)")
    ap.add_argument("--estimate-command", default="", help="the estimate command the --estimates files came from")
    ap.add_argument("--out", default=str(RESULTS / "throughput"))
    args = ap.parse_args()
    rows = set(args.rows.split(","))
    gemm = gemm_gflops(args.gemm_n, args.gemm_k, args.gemm_o, args.gemm_runs)
    print(f"GEMM {gemm['shape']}: {gemm['gflops']} GFLOP/s (1 thread)", file=sys.stderr, flush=True)
    flops: dict[str, dict] = {}
    records = []
    for src in [s for s in args.sources.split(",") if s]:
        doc = json.loads(Path(src).read_text())
        if "eager_lora" in doc:             # benchmarks/step_profile.py: its default program's rows
            doc = {"records": step_profile_rows(doc)}
        for r in doc["records"]:
            if r.get("row") not in rows or "error" in r or "cpu_seconds_per_step" not in r:
                continue
            cfg = r["config"]
            if cfg not in flops:
                flops[cfg] = step_flops(cfg, args.rank)
                print(f"{cfg}: {flops[cfg]['blocks'] / 1e9:.1f} GFLOP per step with remat", file=sys.stderr,
                      flush=True)
            cpu, wall = r["cpu_seconds_per_step"], r["seconds_per_step"]
            f = flops[cfg]["blocks"]
            records.append({"config": cfg, "row": r["row"], "backend": r["export_config"]["backend"],
                            "source": src, "source_date": r.get("provenance", {}).get("date"),
                            "flops_per_step": f, "flops_per_step_no_remat": flops[cfg]["none"],
                            "cpu_seconds_per_step": cpu, "seconds_per_step": wall,
                            "gflops_per_cpu_second": round(f / cpu / 1e9, 2),
                            "efficiency_vs_gemm": round(f / cpu / 1e9 / gemm["gflops"], 3)})
    host = {}
    for backend, key in (("xnnpack", "step"), ("portable", "portable")):
        vals = [r["gflops_per_cpu_second"] for r in records if r["row"] == "et_remat" and r["backend"] == backend]
        host[key] = round(sum(vals) / len(vals), 2) if vals else 0.0
    host["gemm"] = gemm["gflops"]
    doc = {"provenance": provenance(), "gemm": gemm, "records": records, "host": host,
           "host_note": "step / portable: the mean GFLOP per CPU second of the et_remat rows (Python runtime, 1 "
                        "thread) over the headline layouts, per backend; ditskip_edge/memory_estimate/timing.py "
                        "HOST_STEP_GFLOPS / HOST_PORTABLE_GFLOPS / HOST_GEMM_GFLOPS hold these"}
    if args.estimates:
        from ditskip_edge.memory_estimate.timing import time_estimate
        doc["estimate_command"] = args.estimate_command
        doc["personalize"] = {}
        for item in args.estimates.split(","):
            model, path = item.split("=", 1)
            est = json.loads(Path(path).read_text())
            t = time_estimate(est, est["time"]["steps"], est["time"]["grad_accum"], host_figs=host)
            doc["personalize"][model] = {"footprint_gib": est["memory"]["footprint_gib"],
                                         "subject_stage_footprint_gib": est.get("subject_stage", {}).get(
                                             "footprint_gib"), "time": t}

    def md(d: dict) -> str:
        lines = ["# Throughput of the training program on this machine (GFLOP per CPU second)", "",
                 provenance_md(d["provenance"]), "",
                 "FLOPs per step: the memory estimate's trace of the same step (FlopCounterMode: matmuls, "
                 "convolutions, attention; block remat's recomputed forward included). CPU seconds per step: "
                 "benchmarks/device_footprint.py's record (Python row 1 thread; native row ExecuTorch's default "
                 "pool). GEMM: ExecuTorch's XNNPACK fp32 linear alone, 1 thread "
                 f"({'x'.join(map(str, d['gemm']['shape']))}): **{d['gemm']['gflops']} GFLOP/s**. "
                 "`ditskip-edge estimate`'s time section uses these figures "
                 "(ditskip_edge/memory_estimate/timing.py HOST_*). Script docstring: the method.", "",
                 "| config | row | backend | GFLOP / step (remat) | CPU s / step | s / step | GFLOP / CPU s | "
                 "of the GEMM kernel | measured (source date) |", "|---|---|---|---|---|---|---|---|---|"]
        for r in d["records"]:
            lines.append(f"| {r['config']} | {r['row']} | {r['backend']} | {r['flops_per_step'] / 1e9:.1f} | "
                         f"{r['cpu_seconds_per_step']:.3f} | {r['seconds_per_step']:.3f} | "
                         f"{r['gflops_per_cpu_second']} | {r['efficiency_vs_gemm']:.2f} | {r['source_date']} |")
        lines += ["", f"This machine, as `estimate` states it: XNNPACK training program {d['host']['step']} GFLOP/s, "
                  f"portable {d['host']['portable']} GFLOP/s, GEMM kernel {d['host']['gemm']} GFLOP/s (efficiency "
                  f"{d['host']['step'] / d['host']['gemm']:.2f} / {d['host']['portable'] / d['host']['gemm']:.2f})."]
        if d.get("personalize"):
            first = next(iter(d["personalize"].values()))["time"]
            ph = first["phone"]
            lines += ["", "## Time to personalize, ESTIMATED (FLOPs / throughput)", "",
                      f"`{d['estimate_command']}`, its time section recomputed with the figures above. "
                      f"Personalize = the subject stage on every sample + {first['steps']} steps x "
                      f"{first['grad_accum']} samples ({first['samples']} samples). Phone: {ph['class']}, "
                      f"{ph['source']}; x the efficiency measured here = {ph['gflops']} GFLOP/s for the XNNPACK "
                      f"programs, {ph['picture_gflops_decoder']} for generation's decoder (the "
                      f"{first.get('decoder_backend', 'portable')} decode program, {first.get('decoder_source', '')}). "
                      "One core, one "
                      "thread: a phone's other cores, thermal limits and memory bandwidth are not modeled.", "",
                      "| model | footprint GiB (training / subject stage) | training step TFLOP / sample | subject "
                      "stage TFLOP / sample | personalize PFLOP | phone: subject stage min | phone: training min | "
                      "phone: personalize min | this machine: personalize min | picture TFLOP (px, steps) | "
                      "phone: picture min |", "|---|---|---|---|---|---|---|---|---|---|---|"]
            for model, p in d["personalize"].items():
                t = p["time"]
                fl, ph, hm = t["flops"], t["phone"], t["this_machine"]
                pic = f"{fl['picture'] / 1e12:.1f} ({t['picture_at_px']} px)" if fl["picture"] else ""
                lines.append(f"| {model} | {p['footprint_gib']} / {p['subject_stage_footprint_gib']} | "
                             f"{fl['training_step_per_sample'] / 1e12:.2f} | "
                             f"{(fl['subject_stage_per_sample'] or 0) / 1e12:.2f} | {fl['personalize'] / 1e15:.1f} | "
                             f"{ph['subject_stage_minutes']} | {ph['training_minutes']} | "
                             f"**{ph['personalize_minutes']}** | {hm['personalize_minutes']} | {pic} | "
                             f"{ph['picture_minutes']} |")
        return "\n".join(lines) + "\n"

    print(write_result(doc, args.out, md))


if __name__ == "__main__":
    main()
