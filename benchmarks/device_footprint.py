"""Device footprint of the BlockSkip training step, as phones count memory: eager PyTorch against the ExecuTorch
program, with and without block rematerialization, in one run.

    python benchmarks/device_footprint.py --configs tiny            # flux-tiny, sana-tiny: a few minutes
    nice -n 10 python benchmarks/device_footprint.py --configs headline   # FLUX layout 288M, SANA layout (slow)
    -> benchmarks/results/device_footprint[_tiny].{json,md,png}

Per config (memory_speed.py's), BlockSkip 50% at the train resolution, int8 frozen weights, LoRA rank 16, random
weights, one step = forward + backward (no optimizer: the device program's forward_backward does not run one
either; AdamW over the LoRA parameters is the same small addition on both sides), every row in a FRESH process:

  eager          build the step (ditskip_edge/memory_estimate/program.py), 1 warm-up step, N timed steps, torch threads = --threads;
                 int8 dequantized again in backward (as memory_speed.py's variant 6)
  eager_ckpt     the same with torch.utils.checkpoint around each kept block (non-reentrant)
  et             the ExecuTorch program (export/executorch_program.py defaults: XNNPACK matmuls, node order restored,
                 best-fit memory plan; frozen weights in an external .ptd), loaded in a process that imports only
                 the runtime (export/executorch_footprint.py), 1 + N forward_backward calls, threadpool = --threads
  et_remat       the same program with block remat (ExportConfig(remat="blocks"))

Footprint (export/footprint.py): RssAnon (dirty anonymous memory: what iOS' phys_footprint and Android's limiter
count) and RssFile (file-backed: mapped program and data files, library code), peaks over the process baseline
taken after imports: for eager before the model is built, for ExecuTorch before the program is loaded, so both
include the frozen weights as the process holds them (eager: anonymous int8 buffers; ExecuTorch: the mapped .ptd,
file-backed). Also: planned arena against the traced need of the same program (export/executorch_memory.py), and
seconds per step (median wall of the timed steps, and CPU seconds).
Targets (issue 14): ExecuTorch footprint <= 1.0x the eager step without remat, <= 0.5x with remat; ExecuTorch step
time with remat <= 1.5x eager with per-block checkpointing; planned arena <= 1.1x the traced need.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"
MIB = 1024 ** 2
ROWS = ("eager", "eager_ckpt", "et", "et_remat")
LABELS = {"eager": "eager", "eager_ckpt": "eager + per-block checkpoint", "et": "ExecuTorch",
          "et_remat": "ExecuTorch + block remat"}
TARGETS = {"et_vs_eager": 1.0, "et_remat_vs_eager": 0.5, "et_remat_time_vs_eager_ckpt": 1.5, "arena_vs_traced": 1.1}


def step_cfg(spec, rank: int, ckpt: bool = False, export: bool = False):
    from memory_speed import step_config
    # per-block checkpoint: the memory estimate's remat (non-reentrant torch.utils.checkpoint around each kept block)
    cfg = replace(step_config(spec, "blockskip_int8", rank), remat="blocks" if ckpt else "none")
    # the exporter traces the plain dequantization graph (its own pass recomputes it in backward)
    return replace(cfg, recompute_dequant=False) if export else cfg


# ------------------------------------------------------------------------------------------------ eager child
def eager_child(args) -> None:
    from export.footprint import Footprint, PeakSampler
    import torch
    import diffusers  # noqa: F401
    import peft  # noqa: F401
    import torchao.quantization.quant_primitives  # noqa: F401
    from memory_speed import config_specs
    from ditskip_edge.memory_estimate.program import build_step_program
    torch.set_num_threads(args.threads)
    spec = config_specs(args.configs)[args.config]
    cfg = step_cfg(spec, args.rank, ckpt=args.row == "eager_ckpt")
    base = Footprint.read()
    peaks, times, cpu = [], [], []
    with PeakSampler() as build:
        prog = build_step_program(cfg, device="cpu", seed=0)
    for i in range(args.steps + 1):
        with PeakSampler() as s:
            t0, c0 = time.perf_counter(), time.process_time()
            loss = prog.loss()
            loss.backward()
            for p in prog.lora_params:
                p.grad = None
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        peaks.append(s.peak)
    end = Footprint.read()
    later, later_cpu = times[1:], cpu[1:]
    print(json.dumps({
        "row": args.row, "config": args.config, "baseline": base.to_json(), "end": end.to_json(),
        "footprint_rss_anon_bytes": max([p["rss_anon_bytes"] for p in peaks] + [build.peak["rss_anon_bytes"]])
        - base.rss_anon_bytes,
        "footprint_rss_file_bytes": max([p["rss_file_bytes"] for p in peaks] + [build.peak["rss_file_bytes"]])
        - base.rss_file_bytes,
        "rss_peak_over_baseline_bytes": end.rss_peak_bytes - base.rss_bytes,
        "step_peaks_rss_anon_bytes": [p["rss_anon_bytes"] - base.rss_anon_bytes for p in peaks],
        "seconds_per_step": sorted(later)[len(later) // 2], "cpu_seconds_per_step": sorted(later_cpu)[len(later_cpu) // 2],
        "step_seconds": times, "loss": float(loss), "frozen_weights_bytes": prog.frozen_bytes(),
        "lora_bytes": prog.lora_bytes()}))


def run_eager(args, name: str, row: str) -> dict:
    from memory_speed import MALLOC_ENV
    cmd = [sys.executable, __file__, "--eager-child", "--configs", args.configs, "--config", name, "--row", row,
           "--steps", str(args.steps), "--rank", str(args.rank), "--threads", str(args.threads)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), **MALLOC_ENV)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        return {"row": row, "config": name, "error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------- ExecuTorch rows
def program_tag(config: str, remat: str) -> str:
    """The folder a row's exported program is written to (and --remeasure reads it from)."""
    return f"{config}_{remat.replace(':', '')}"


def export_row(spec, args, remat: str, workdir: Path) -> dict:
    import torch
    from export.step_module import FlatTrainingStep, flatten_step_inputs
    from export.executorch_memory import traced_need
    from export.executorch_program import ExportConfig, StepModule, export_training_program
    from ditskip_edge.memory_estimate.program import build_step_program
    from ditskip_edge.quantize import QUANT_LAYERS, QuantSpec
    from ditskip_edge.training_step import TrainingStep
    cfg = step_cfg(spec, args.rank, export=True)
    prog = build_step_program(cfg, device="cpu", seed=0)
    names, example = flatten_step_inputs(*prog.inputs)
    flat = FlatTrainingStep(TrainingStep(prog.module, torch.nn.Identity()), names).eval()
    step = StepModule(flat, names, example, {}, prog.module.view,
                      sum(isinstance(m, QUANT_LAYERS) for m in flat.modules()))
    ecfg = ExportConfig(quant=QuantSpec("int8"), backend=args.backend, remat=remat, external_weights=True,
                        xnnpack_ops=args.xnnpack_ops, trace_need=False)
    t0 = time.perf_counter()
    program = export_training_program(step, ecfg)
    export_s = time.perf_counter() - t0
    tag = program_tag(spec.name, remat)
    (workdir / tag).mkdir(exist_ok=True)
    paths = program.write(workdir / tag / "train_step.pte")
    inputs = workdir / tag / "inputs.pt"
    torch.save(example, inputs)
    traced = traced_need(step, ecfg)
    return {"export_seconds": round(export_s, 1), "memory": program.memory, "passes": program.passes,
            "ops": {k: v for k, v in program.ops.items() if k != "xnnpack_ops"}, "traced": traced,
            "pte": str(paths[0]), "data": str(paths[1]) if len(paths) > 1 else None, "inputs": str(inputs),
            "export_config": {"remat": remat, "backend": args.backend, "xnnpack_ops": args.xnnpack_ops,
                              "external_weights": True, "memory_planner": ecfg.memory_planner}}


def short_error(e: BaseException, limit: int = 1500) -> str:
    """The error's type and its message without the FX graph dumps ExecuTorch's errors embed."""
    lines = [ln for ln in str(e).splitlines() if ln.strip() and not ln.lstrip().startswith(("%", "graph(", "return"))
             and "placeholder[" not in ln]
    return f"{type(e).__name__}: " + " / ".join(lines)[-limit:]


def run_et(args, spec, row: str, workdir: Path) -> dict:
    try:
        rec = export_row(spec, args, row_remat(row), workdir)
    except Exception as e:   # noqa: BLE001 - report the gap, keep the other rows
        return {"row": row, "config": spec.name, "error": "export: " + short_error(e)}
    rec.update(row=row, config=spec.name)
    return measure_et(args, spec, rec)


def measure_et(args, spec, rec: dict) -> dict:
    """Run the exported program (rec's pte / ptd / inputs) in a fresh runtime process, with the allocator setting
    the eager rows run under (memory_speed.MALLOC_ENV: freed blocks go back to the system, so RSS follows the bytes
    in use), and put the estimate of the same program beside it."""
    from memory_speed import MALLOC_ENV
    from export.executorch_footprint import measure_program
    remat = row_remat(rec["row"])
    try:
        rec["runtime"] = measure_program(rec["pte"], rec["inputs"], data=rec["data"], steps=args.steps + 1,
                                         threads=args.threads, env=MALLOC_ENV)
    except Exception as e:   # noqa: BLE001
        rec["error"] = "runtime: " + short_error(e)
        return rec
    rec.pop("error", None)
    rt = rec["runtime"]
    rec["footprint_rss_anon_bytes"] = rt["footprint_rss_anon_bytes"]
    rec["footprint_rss_file_bytes"] = rt["footprint_rss_file_bytes"]
    rec["seconds_per_step"] = rt["seconds_per_step"]
    rec["cpu_seconds_per_step"] = rt.get("cpu_seconds_per_step")
    rec["loss"] = rt["loss"]
    try:
        rec["estimate"] = estimate_row(spec, args, remat, program_counts(rec.get("memory", {})))
        rec["measured_over_estimate"] = rec["footprint_rss_anon_bytes"] / rec["estimate"]["step_footprint_bytes"]
    except Exception as e:   # noqa: BLE001 - keep the measurement
        rec["estimate_error"] = short_error(e)
    return rec


def program_counts(memory: dict) -> dict | None:
    """The program's instructions and XNNPACK delegates (its memory report); None for a record written before the
    report had them (the estimate then counts on the trace)."""
    if "instructions" not in memory:
        return None
    return {"instructions": memory["instructions"], "xnnpack_delegates": memory["xnnpack_delegates"]}


def estimate_row(spec, args, remat: str, program: dict | None = None) -> dict:
    """The memory estimate (ditskip-edge estimate, ditskip_edge/memory_estimate/) of the program this row runs: same
    step, math attention (the program's), this remat, weights mapped, no runtime overhead; the program state from
    the exported program's instruction and delegate counts (`program`), else from the trace. The row runs
    forward_backward only (no optimizer), so the comparable figure leaves out AdamW states; the one copy of the
    gradients the runtime takes out of the program stands where the loop's gradient sums do:
    step_footprint = activation arena + LoRA parameters + gradient copy + step inputs + program state."""
    from ditskip_edge.memory_estimate.memory import MemoryEstimate, trace_step
    cfg = replace(step_cfg(spec, args.rank), remat=remat)
    est = MemoryEstimate.from_trace(trace_step(cfg, attention="math", count_flops=False, backend=args.backend), 0,
                                    "mapped", program)
    step = (est.activation_arena_bytes + est.lora_params_bytes + est.gradient_sums_bytes + est.step_inputs_bytes
            + est.program_state_bytes)
    return {"step_footprint_bytes": step, "file_backed_bytes": est.file_backed_bytes,
            "file_backed_working_set_bytes": est.file_backed_working_set_bytes, "memory_estimate": est.to_json()}


# ------------------------------------------------------------------------------------------------ report
def summarize(records: list[dict]) -> dict:
    by = {}
    for r in records:
        if "error" not in r:
            by.setdefault(r["config"], {})[r["row"]] = r
    out = {}
    for cfg, rows in by.items():
        s = {}
        e, ec, et, er = (rows.get(k) for k in ROWS)
        if e and et:
            s["et_vs_eager"] = et["footprint_rss_anon_bytes"] / e["footprint_rss_anon_bytes"]
        if e and er:
            s["et_remat_vs_eager"] = er["footprint_rss_anon_bytes"] / e["footprint_rss_anon_bytes"]
        if ec and er:
            s["et_remat_time_vs_eager_ckpt"] = er["seconds_per_step"] / ec["seconds_per_step"]
            s["et_remat_cpu_time_vs_eager_ckpt"] = (er["cpu_seconds_per_step"] or float("nan")) / ec["cpu_seconds_per_step"]
        for k, r in (("et", et), ("et_remat", er)):
            if r:
                s[f"{k}_arena_vs_traced"] = r["memory"]["planned_arena_bytes"] / r["traced"]["traced_equivalent_bytes"]
                if "measured_over_estimate" in r:
                    s[f"{k}_measured_vs_estimate"] = r["measured_over_estimate"]
        out[cfg] = s
    return out


def write_report(res: dict, stem: Path) -> None:
    from _meta import provenance_md
    recs = res["records"]
    lines = ["# Device footprint: eager vs the ExecuTorch program (BlockSkip 50%, int8, XNNPACK)", "",
             provenance_md(res["provenance"]), "",
             "Footprint = peak over the process baseline (after imports: eager before building the model, ExecuTorch "
             "before loading the program). RssAnon is what a phone counts; RssFile is file-backed (mapped program and "
             ".ptd, library code), clean and reclaimable. Step = forward + backward, "
             f"{res['threads']} thread(s). Script docstring: what each row runs.", "",
             "| config | row | RssAnon MiB | RssFile MiB | RSS peak MiB | planned arena MiB | traced need MiB "
             "(arena / traced) | arena lower bound MiB | estimate MiB (measured / estimate) | s / step | CPU s / step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v: "" if v is None else f"{v / MIB:.1f}"  # noqa: E731
    for r in recs:
        if "error" in r:
            err = r["error"].replace("\n", " ").replace("|", "/")
            lines.append(f"| {r['config']} | {LABELS[r['row']]} | failed: `{err[:300]}` | | | | | | | | |")
            continue
        mem, tr = r.get("memory"), r.get("traced")
        arena = mem["planned_arena_bytes"] if mem else None
        traced = tr["traced_equivalent_bytes"] if tr else None
        ratio = f" ({arena / traced:.2f}x)" if arena and traced else ""
        rss_peak = r.get("rss_peak_over_baseline_bytes", r.get("runtime", {}).get("rss_peak_over_baseline_bytes"))
        est = r.get("estimate", {}).get("step_footprint_bytes")
        est_txt = f"{f(est)} ({r['measured_over_estimate']:.2f}x)" if est else ""
        lines.append(f"| {r['config']} | {LABELS[r['row']]} | {f(r['footprint_rss_anon_bytes'])} | "
                     f"{f(r['footprint_rss_file_bytes'])} | {f(rss_peak)} | {f(arena)} | {f(traced)}{ratio} | "
                     f"{f(mem['arena_lower_bound_bytes']) if mem else ''} | {est_txt} | {r['seconds_per_step']:.3f} | "
                     f"{(r.get('cpu_seconds_per_step') or float('nan')):.3f} |")
    lines += ["", "Targets (issue 14):", ""]
    names = {"et_vs_eager": "ExecuTorch RssAnon / eager (<= 1.0)", "et_remat_vs_eager":
             "ExecuTorch + remat RssAnon / eager (<= 0.5)", "et_remat_time_vs_eager_ckpt":
             "ExecuTorch + remat s/step / eager + checkpoint (<= 1.5)", "et_remat_cpu_time_vs_eager_ckpt":
             "the same in CPU seconds", "et_arena_vs_traced": "ExecuTorch planned arena / traced need (<= 1.1)",
             "et_remat_arena_vs_traced": "ExecuTorch + remat planned arena / traced need (<= 1.1)",
             "et_measured_vs_estimate": "ExecuTorch RssAnon / memory estimate (within 10%: 0.9 .. 1.1)",
             "et_remat_measured_vs_estimate": "ExecuTorch + remat RssAnon / memory estimate (within 10%: 0.9 .. 1.1)"}
    for cfg, s in res["summary"].items():
        for k, v in s.items():
            base = k.replace("et_remat_arena", "arena").replace("et_arena", "arena").replace("_cpu_time", "_time")
            goal = TARGETS.get(base)
            verdict = "" if goal is None else (" met" if v <= goal else " NOT met")
            if k.endswith("measured_vs_estimate"):
                verdict = " met" if 0.9 <= v <= 1.1 else " NOT met"
            lines.append(f"- {cfg}: {names.get(k, k)}: {v:.2f}{verdict}")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


def plot(res: dict, stem: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    configs = sorted({r["config"] for r in res["records"]})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.2
    for ci, cfg in enumerate(configs):
        rows = {r["row"]: r for r in res["records"] if r["config"] == cfg and "error" not in r}
        for ri, row in enumerate(ROWS):
            r = rows.get(row)
            if r is None:
                continue
            x = ci + (ri - 1.5) * width
            anon = r["footprint_rss_anon_bytes"] / MIB
            filem = r["footprint_rss_file_bytes"] / MIB
            axes[0].bar(x, anon, width, color=f"C{ri}", label=LABELS[row] if ci == 0 else None)
            axes[0].bar(x, filem, width, bottom=anon, color=f"C{ri}", alpha=0.3, hatch="//")
            axes[0].text(x, anon, f"{anon:.0f}", ha="center", va="bottom", fontsize=7)
            axes[1].bar(x, r.get("cpu_seconds_per_step") or r["seconds_per_step"], width, color=f"C{ri}")
    for ax, title, unit in ((axes[0], "footprint over baseline (solid: RssAnon, hatched: + RssFile)", "MiB"),
                            (axes[1], "CPU seconds per step (forward + backward; wall on a shared machine inflates)", "CPU s")):
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(configs)
        ax.set_xlim(-0.5, len(configs) - 0.5)           # a config's four row slots stay centred on its label
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(unit)
    axes[0].legend(fontsize=7)
    fig.suptitle("BlockSkip 50% int8: eager vs ExecuTorch (XNNPACK), " + res["provenance"]["date"], fontsize=9)
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="tiny", help="tiny | headline")
    ap.add_argument("--only", default="", help="comma-separated config names")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--steps", type=int, default=2, help="timed steps per row (after one warm-up)")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backend", default="xnnpack", choices=["portable", "xnnpack"])
    ap.add_argument("--xnnpack-ops", default="matmul", choices=["all", "matmul"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep-programs", default=None, help="export into this folder and keep the programs")
    ap.add_argument("--remeasure", default="", help="a result JSON whose ExecuTorch programs are in --keep-programs: "
                    "measure them again (no export) into --out")
    ap.add_argument("--merge", default="", help="comma-separated result JSONs: write --out from their records (a "
                    "later file's (config, row) replaces an earlier one's), measuring nothing")
    ap.add_argument("--eager-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--row", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.eager_child:
        return eager_child(args)
    from _meta import provenance
    from memory_speed import config_specs
    prov = provenance()
    if (args.merge or args.remeasure) and not args.out:
        ap.error("--merge / --remeasure need --out")
    if args.remeasure and not args.keep_programs:
        ap.error("--remeasure needs --keep-programs (the folder the earlier run kept its programs in)")
    if args.merge:
        return merge(args, prov)
    if args.remeasure:
        return remeasure(args, prov)
    specs = config_specs(args.configs)
    if args.only:
        specs = {k: v for k, v in specs.items() if k in args.only.split(",")}
    rows = args.rows.split(",")
    records = []
    stem = Path(args.out) if args.out else RESULTS / ("device_footprint" if args.configs == "headline"
                                                      else f"device_footprint_{args.configs}")
    with (contextlib.nullcontext(args.keep_programs) if args.keep_programs else tempfile.TemporaryDirectory()) as tmp:
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for name, spec in specs.items():
            for row in rows:
                t0 = time.perf_counter()
                rec = run_eager(args, name, row) if row.startswith("eager") else run_et(args, spec, row, Path(tmp))
                rec["wall_seconds"] = round(time.perf_counter() - t0, 1)
                records.append(rec)
                msg = rec.get("error", "")[:300] or (
                    f"RssAnon {rec['footprint_rss_anon_bytes'] / MIB:.1f} MiB, RssFile "
                    f"{rec['footprint_rss_file_bytes'] / MIB:.1f} MiB, {rec['seconds_per_step']:.3f} s/step")
                print(f"{name} {row}: {msg} [{rec['wall_seconds']} s]", file=sys.stderr, flush=True)
                write_results(args, prov, records, stem, partial=True)   # partial results kept
    write_results(args, prov, records, stem)


def write_results(args, prov: dict, records: list, stem: Path, partial: bool = False) -> None:
    """stem.json (every record and the target summary); with the run complete also stem.md and stem.png."""
    res = {"provenance": prov, "threads": args.threads, "steps": args.steps, "records": records,
           "summary": summarize(records)}
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    if not partial:
        write_report(res, stem)
        plot(res, stem)
        print(f"wrote {stem}.json / .md / .png", file=sys.stderr)


def row_remat(row: str) -> str:
    """The export's remat setting for an ExecuTorch row."""
    return "blocks" if row == "et_remat" else "none"


def remeasure(args, prov: dict) -> None:
    """The ExecuTorch rows of an earlier run, measured again from the programs it kept (--keep-programs)."""
    from memory_speed import config_specs
    old = json.loads(Path(args.remeasure).read_text())
    specs = config_specs(args.configs)
    records = []
    for r in old["records"]:
        if not r["row"].startswith("et"):
            continue
        folder = Path(args.keep_programs) / program_tag(r["config"], row_remat(r["row"]))
        r = dict(r, pte=str(folder / "train_step.pte"), inputs=str(folder / "inputs.pt"),
                 data=str(folder / "train_step.ptd") if r.get("data") else None)
        rec = measure_et(args, specs[r["config"]], r)
        records.append(rec)
        print(f"{rec['config']} {rec['row']}: RssAnon {rec.get('footprint_rss_anon_bytes', 0) / MIB:.1f} MiB",
              file=sys.stderr, flush=True)
    prov = dict(prov, command=prov["command"] + f" (programs exported by: {old['provenance']['command']}, "
                f"{old['provenance']['date']})")
    write_results(args, prov, records, Path(args.out))


def merge(args, prov: dict) -> None:
    """One report from the rows of earlier runs (each record keeps its own provenance in the merged command)."""
    by_key, sources = {}, []
    for path in args.merge.split(","):
        res = json.loads(Path(path).read_text())
        sources.append(f"{res['provenance']['command']} ({res['provenance']['date']})")
        for r in res["records"]:
            if not args.only or r["config"] in args.only.split(","):
                by_key[(r["config"], r["row"])] = r
    records = [by_key[k] for k in sorted(by_key, key=lambda k: (k[0], ROWS.index(k[1])))]
    prov = dict(prov, command=prov["command"] + " <- " + "; ".join(sources))
    write_results(args, prov, records, Path(args.out))


if __name__ == "__main__":
    main()
