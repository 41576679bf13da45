"""Device footprint of the BlockSkip training step, as phones count memory: eager PyTorch against the ExecuTorch
program (in ExecuTorch's Python bindings and in the native device runtime a phone runs), with and without block
rematerialization, in one run.

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
  native         the et row's program run by the native core, `ditskip-run step` (device_runtime/: C++ over
                 ExecuTorch's C++ SDK, .pte and .ptd mapped without mlock), in its own process: 1 + N calls of the
                 method, no optimizer and no copy of the gradients; ExecuTorch's default thread pool
  native_remat   the et_remat row's program, likewise

Footprint (export/footprint.py): RssAnon (dirty anonymous memory: what iOS' phys_footprint and Android's limiter
count) and RssFile (file-backed: mapped program and data files, library code), peaks over the process baseline
taken after imports: for eager before the model is built, for ExecuTorch before the program is loaded, so both
include the frozen weights as the process holds them (eager: anonymous int8 buffers; ExecuTorch: the mapped .ptd,
file-backed). The native rows are the WHOLE process, nothing subtracted (the runner's peaks sampled from
/proc/PID/status by device_tests/native_runtime.py measure): a phone counts the whole app. The runtime's fixed cost
(`ditskip-run footprint`: the core and ExecuTorch's libraries loaded, nothing else) is measured once per run and
reported; the native rows are compared with the Python row's over-baseline figure + that fixed cost, and with the
memory estimate whose runtime overhead is that measured fixed cost (`ditskip-edge estimate --runtime-overhead-mib`).
Also: planned arena against the traced need of the same program (export/executorch_memory.py), and seconds per step
(median wall of the timed steps, and CPU seconds).
Targets (issue 14): ExecuTorch footprint <= 1.0x the eager step without remat, <= 0.5x with remat; ExecuTorch step
time with remat <= 1.5x eager with per-block checkpointing; planned arena <= 1.1x the traced need.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
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
ROWS = ("eager", "eager_ckpt", "et", "et_remat", "native", "native_remat")
LABELS = {"eager": "eager", "eager_ckpt": "eager + per-block checkpoint", "et": "ExecuTorch",
          "et_remat": "ExecuTorch + block remat", "native": "native core (ditskip-run)",
          "native_remat": "native core + block remat"}
NATIVE_OF = {"native": "et", "native_remat": "et_remat"}     # a native row runs this row's program
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


_EXPORTED: dict[str, dict] = {}     # program_tag -> export_row's record: a native row reuses its et row's program


def export_row(spec, args, remat: str, workdir: Path) -> dict:
    tag = program_tag(spec.name, remat)
    if tag in _EXPORTED and Path(_EXPORTED[tag]["pte"]).is_file():
        return copy.deepcopy(_EXPORTED[tag])
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
    (workdir / tag).mkdir(exist_ok=True)
    paths = program.write(workdir / tag / "train_step.pte")
    inputs = workdir / tag / "inputs.pt"
    torch.save(example, inputs)
    traced = traced_need(step, ecfg)
    _EXPORTED[tag] = {"export_seconds": round(export_s, 1), "memory": program.memory, "passes": program.passes,
            "ops": {k: v for k, v in program.ops.items() if k != "xnnpack_ops"}, "traced": traced,
            "pte": str(paths[0]), "data": str(paths[1]) if len(paths) > 1 else None, "inputs": str(inputs),
            "export_config": {"remat": remat, "backend": args.backend, "xnnpack_ops": args.xnnpack_ops,
                              "external_weights": True, "memory_planner": ecfg.memory_planner}}
    return copy.deepcopy(_EXPORTED[tag])


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


def run_native(args, spec, row: str, workdir: Path, runner, fixed: dict) -> dict:
    try:
        rec = export_row(spec, args, row_remat(row), workdir)
    except Exception as e:   # noqa: BLE001
        return {"row": row, "config": spec.name, "error": "export: " + short_error(e)}
    rec.update(row=row, config=spec.name)
    return measure_native(args, spec, rec, runner, fixed)


def native_inputs(inputs_pt: str) -> Path:
    """The step inputs (a torch.save'd list) as `ditskip-run step --inputs` reads them (native_ptd.write_inputs),
    beside the program."""
    import torch
    from device_tests.native_ptd import write_inputs
    folder = Path(inputs_pt).with_name("inputs_native")
    write_inputs(folder, [t.detach().contiguous().numpy() for t in torch.load(inputs_pt, weights_only=True)])
    return folder


def measure_native(args, spec, rec: dict, runner, fixed: dict) -> dict:
    """Run the exported program with `ditskip-run step` in its own process (the allocator setting of the other rows)
    and sample the whole process; the estimate beside it with the measured fixed cost as its runtime overhead."""
    from memory_speed import MALLOC_ENV
    from device_tests.native_runtime import measure
    cmd = ["step", rec["pte"], "--inputs", native_inputs(rec["inputs"]), "--steps", args.steps + 1, "--json"]
    if rec.get("data"):
        cmd[2:2] = ["--data", rec["data"]]
    m = measure(runner, *cmd, env=MALLOC_ENV)
    out = m.json
    if m.returncode != 0 or out is None:
        rec["error"] = f"ditskip-run step exited {m.returncode}: {m.stderr.strip()[-1500:]}"
        return rec
    rec.pop("error", None)
    fp = out["footprint"]
    own = [fp["loaded"]] + fp["after_steps"]            # the runner's own readings: a floor under the sampled peak
    rec["process"] = "whole"
    rec["native"] = {"step": out, "measured": m.to_json(), "command": "ditskip-run " + " ".join(map(str, cmd))}
    rec["footprint_rss_anon_bytes"] = max([m.peak_anon_bytes] + [r["rss_anon_bytes"] for r in own])
    rec["footprint_rss_file_bytes"] = max([m.peak_file_bytes] + [r["rss_file_bytes"] for r in own])
    rec["rss_peak_over_baseline_bytes"] = max(a + f for _, a, f in m.timeline) if m.timeline else None
    rec["seconds_per_step"] = out["seconds_per_step"]
    rec["cpu_seconds_per_step"] = out["cpu_seconds_per_step"]
    rec["loss"] = out["loss"]
    rec["fixed_cost"] = fixed
    try:
        est = estimate_row(spec, args, row_remat(rec["row"]), program_counts(rec.get("memory", {})))
        # the step verb copies no gradients out (the Python row's runner and a training loop hold one copy), and the
        # process carries the runtime's fixed cost
        est["native_whole_bytes"] = (est["step_footprint_bytes"] - est["memory_estimate"]["gradient_sums_bytes"]
                                     + fixed["rss_anon_bytes"])
        est["runtime_overhead_bytes"] = fixed["rss_anon_bytes"]
        rec["estimate"] = est
        rec["measured_over_estimate"] = rec["footprint_rss_anon_bytes"] / est["native_whole_bytes"]
    except Exception as e:   # noqa: BLE001 - keep the measurement
        rec["estimate_error"] = short_error(e)
    return rec


def native_fixed_cost(runner) -> dict:
    """`ditskip-run footprint --json` in its own process: RssAnon / RssFile with the core and ExecuTorch's libraries
    loaded and nothing else (the whole process's floor)."""
    from memory_speed import MALLOC_ENV
    from device_tests.native_runtime import measure
    m = measure(runner, "footprint", "--json", env=MALLOC_ENV)
    if m.returncode != 0 or m.json is None:
        raise RuntimeError(f"ditskip-run footprint exited {m.returncode}: {m.stderr.strip()[-800:]}")
    return {"rss_anon_bytes": m.json["rss_anon_bytes"], "rss_file_bytes": m.json["rss_file_bytes"],
            "command": "ditskip-run footprint --json", "counts": m.json["counts"], "version": m.json["version"]}


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
def backend_of(r: dict) -> str | None:
    """An ExecuTorch / native row's training-program backend (None for the eager rows)."""
    return (r.get("export_config") or {}).get("backend")


def row_label(r: dict) -> str:
    return LABELS[r["row"]] + (" (portable kernels)" if backend_of(r) == "portable" else "")


def summarize(records: list[dict]) -> dict:
    by = {}
    # the targets read the XNNPACK programs where a merged report has both backends (portable rows first: replaced)
    for r in sorted(records, key=lambda r: backend_of(r) != "portable"):
        if "error" not in r:
            by.setdefault(r["config"], {})[r["row"]] = r
    out = {}
    for cfg, rows in by.items():
        s = {}
        e, ec, et, er = (rows.get(k) for k in ROWS[:4])
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
        for k, py_row in NATIVE_OF.items():
            n, py = rows.get(k), rows.get(py_row)
            if not n:
                continue
            if py:
                fixed = n["fixed_cost"]["rss_anon_bytes"]
                fp = n["native"]["step"]["footprint"]
                # the step inputs the native process reads from files; the Python row loads them before its baseline
                inputs = fp["inputs_read"]["rss_anon_bytes"] - fp["start"]["rss_anon_bytes"]
                s[f"{k}_whole_mib"] = n["footprint_rss_anon_bytes"] / MIB
                s[f"{k}_python_plus_fixed_mib"] = (py["footprint_rss_anon_bytes"] + fixed) / MIB
                s[f"{k}_whole_vs_python_plus_fixed"] = n["footprint_rss_anon_bytes"] / (py["footprint_rss_anon_bytes"] + fixed)
                s[f"{k}_inputs_mib"] = inputs / MIB
                s[f"{k}_whole_vs_python_plus_fixed_and_inputs"] = (n["footprint_rss_anon_bytes"]
                                                                   / (py["footprint_rss_anon_bytes"] + fixed + inputs))
                s[f"{k}_loss_equals_python"] = n["loss"] == py["loss"]
            if "measured_over_estimate" in n:
                s[f"{k}_measured_vs_estimate"] = n["measured_over_estimate"]
        out[cfg] = s
    return out


def write_report(res: dict, stem: Path) -> None:
    from _meta import provenance_md
    recs = res["records"]
    fixed = res.get("native_fixed_cost")
    lines = ["# Device footprint: eager vs the ExecuTorch program (BlockSkip 50%, int8, XNNPACK), in the Python "
             "bindings and in the native runtime", "",
             provenance_md(res["provenance"]), "",
             "Footprint: for eager and ExecuTorch (Python) the peak over the process baseline (after imports: eager "
             "before building the model, ExecuTorch before loading the program); for the native core (`ditskip-run "
             "step`, no Python in the process) the WHOLE process, nothing subtracted. RssAnon is what a phone "
             "counts; RssFile is file-backed (mapped program and .ptd, library code), clean and reclaimable. Step = "
             f"forward + backward; Python rows {res['threads']} thread(s), native rows ExecuTorch's default thread "
             "pool. Script docstring: what each row runs; each record's own command, machine and date are in the "
             "JSON (`provenance`).", ""]
    if fixed:
        lines += [f"Native runtime's fixed cost (`{fixed['command']}`: the core and ExecuTorch's libraries loaded, "
                  f"nothing else): RssAnon {fixed['rss_anon_bytes'] / MIB:.1f} MiB, RssFile "
                  f"{fixed['rss_file_bytes'] / MIB:.1f} MiB. The native rows' estimate = the ExecuTorch row's step "
                  "footprint estimate - the gradient copy (the step verb takes none) + this fixed cost as the "
                  "runtime overhead.", ""]
    lines += ["| config | row | counts | RssAnon MiB | RssFile MiB | RSS peak MiB | planned arena MiB | traced need MiB "
              "(arena / traced) | arena lower bound MiB | estimate MiB (measured / estimate) | s / step | CPU s / step |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v: "" if v is None else f"{v / MIB:.1f}"  # noqa: E731
    for r in recs:
        if "error" in r:
            err = r["error"].replace("\n", " ").replace("|", "/")
            lines.append(f"| {r['config']} | {row_label(r)} | | failed: `{err[:300]}` | | | | | | | | |")
            continue
        mem, tr = r.get("memory"), r.get("traced")
        arena = mem["planned_arena_bytes"] if mem else None
        traced = tr["traced_equivalent_bytes"] if tr else None
        ratio = f" ({arena / traced:.2f}x)" if arena and traced else ""
        rss_peak = r.get("rss_peak_over_baseline_bytes", r.get("runtime", {}).get("rss_peak_over_baseline_bytes"))
        est = r.get("estimate", {}).get("native_whole_bytes" if r["row"] in NATIVE_OF else "step_footprint_bytes")
        counts = "whole process" if r.get("process") == "whole" else "over baseline"
        est_txt = f"{f(est)} ({r['measured_over_estimate']:.2f}x)" if est else ""
        lines.append(f"| {r['config']} | {row_label(r)} | {counts} | {f(r['footprint_rss_anon_bytes'])} | "
                     f"{f(r['footprint_rss_file_bytes'])} | {f(rss_peak)} | {f(arena)} | {f(traced)}{ratio} | "
                     f"{f(mem['arena_lower_bound_bytes']) if mem else ''} | {est_txt} | {r['seconds_per_step']:.3f} | "
                     f"{(r.get('cpu_seconds_per_step') or float('nan')):.3f} |")
    lines += ["", "Targets (issue 14; the native rows: issue 55):", ""]
    names = {"et_vs_eager": "ExecuTorch RssAnon / eager (<= 1.0)", "et_remat_vs_eager":
             "ExecuTorch + remat RssAnon / eager (<= 0.5)", "et_remat_time_vs_eager_ckpt":
             "ExecuTorch + remat s/step / eager + checkpoint (<= 1.5)", "et_remat_cpu_time_vs_eager_ckpt":
             "the same in CPU seconds", "et_arena_vs_traced": "ExecuTorch planned arena / traced need (<= 1.1)",
             "et_remat_arena_vs_traced": "ExecuTorch + remat planned arena / traced need (<= 1.1)",
             "et_measured_vs_estimate": "ExecuTorch RssAnon / memory estimate (within 10%: 0.9 .. 1.1)",
             "et_remat_measured_vs_estimate": "ExecuTorch + remat RssAnon / memory estimate (within 10%: 0.9 .. 1.1)",
             "native_measured_vs_estimate": "native core whole-process RssAnon / memory estimate with the measured "
             "fixed cost (within 10%: 0.9 .. 1.1)",
             "native_remat_measured_vs_estimate": "native core + remat whole-process RssAnon / memory estimate with "
             "the measured fixed cost (within 10%: 0.9 .. 1.1)"}
    lora = res.get("eager_lora") or {}
    if lora:
        lines += [f"Speed against standard LoRA (issue 57: >= 4x in CPU seconds, footprint not above the native "
                  f"remat row's 70.6 MiB (FLUX) / 85.4 MiB (SANA) of 2026-12-07): eager standard LoRA's CPU s per "
                  f"step from {res['eager_lora_source']} (1 thread)", ""]
        for r in recs:
            e = lora.get(r["config"])
            if e and r["row"] in ("et_remat", "native_remat", "et", "native") and "error" not in r:
                ratio = e["cpu_seconds_per_step"] / r["cpu_seconds_per_step"]
                lines.append(f"- {r['config']}: eager standard LoRA {e['cpu_seconds_per_step']:.2f} CPU s / "
                             f"{row_label(r)} {r['cpu_seconds_per_step']:.2f} CPU s = {ratio:.2f}x "
                             f"({'met' if ratio >= 4 else 'NOT met'}; RssAnon {r['footprint_rss_anon_bytes'] / MIB:.1f}"
                             f" MiB)")
        lines.append("")
    for cfg, s in res["summary"].items():
        for k in NATIVE_OF:
            if f"{k}_whole_mib" in s:
                py = NATIVE_OF[k]
                v = s[f"{k}_whole_vs_python_plus_fixed"]
                lines.append(f"- {cfg}: {LABELS[k]} whole-process RssAnon {s[f'{k}_whole_mib']:.1f} MiB vs "
                             f"{LABELS[py]} over baseline + fixed cost {s[f'{k}_python_plus_fixed_mib']:.1f} MiB: "
                             f"{v:.2f}x ({'at most' if v <= 1.0 else 'MORE than'} it); of the native figure "
                             f"{s[f'{k}_inputs_mib']:.1f} MiB are the step inputs read from files, which the Python "
                             f"row loads before its baseline: with them on both sides "
                             f"{s[f'{k}_whole_vs_python_plus_fixed_and_inputs']:.2f}x; loss "
                             f"{'equal' if s[f'{k}_loss_equals_python'] else 'DIFFERENT'} (bit for bit)")
        for k, v in s.items():
            if k.startswith("native") and not k.endswith("measured_vs_estimate"):
                continue
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
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    present = [row for row in ROWS if any(r["row"] == row and "error" not in r for r in res["records"])]
    width = 0.8 / max(len(present), 1)
    for ci, cfg in enumerate(configs):
        rows = {r["row"]: r for r in res["records"] if r["config"] == cfg and "error" not in r}
        for ri, row in enumerate(present):
            r = rows.get(row)
            if r is None:
                continue
            x = ci + (ri - (len(present) - 1) / 2) * width
            ri = ROWS.index(row)
            anon = r["footprint_rss_anon_bytes"] / MIB
            filem = r["footprint_rss_file_bytes"] / MIB
            label = LABELS[row] + (" (whole process)" if r.get("process") == "whole" else "")
            axes[0].bar(x, anon, width, color=f"C{ri}", label=label if ci == 0 else None)
            axes[0].bar(x, filem, width, bottom=anon, color=f"C{ri}", alpha=0.3, hatch="//")
            axes[0].text(x, anon, f"{anon:.0f}", ha="center", va="bottom", fontsize=7)
            axes[1].bar(x, r.get("cpu_seconds_per_step") or r["seconds_per_step"], width, color=f"C{ri}")
    for ax, title, unit in ((axes[0], "footprint (solid: RssAnon, hatched: + RssFile); over baseline, native: whole "
                                      "process", "MiB"),
                            (axes[1], "CPU seconds per step (forward + backward; wall on a shared machine inflates)", "CPU s")):
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(configs)
        ax.set_xlim(-0.5, len(configs) - 0.5)           # a config's four row slots stay centred on its label
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(unit)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("BlockSkip 50% int8: eager vs ExecuTorch (XNNPACK; Python bindings and the native core), "
                 + res["provenance"]["date"], fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))          # the legend below both panels
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
    ap.add_argument("--lora-from", default="", help="a benchmarks/memory_speed.py result JSON with the 'lora' variant: "
                    "the report states the ExecuTorch rows' CPU-seconds speedup over eager standard LoRA (issue 57)")
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
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"--rows {','.join(unknown)}: expected some of {','.join(ROWS)}")
    runner, fixed = None, None
    if any(r in NATIVE_OF for r in rows):
        from device_tests.native_runtime import build
        runner = build("x86_64")                     # make native (incremental)
        fixed = native_fixed_cost(runner)
        print(f"native fixed cost: RssAnon {fixed['rss_anon_bytes'] / MIB:.1f} MiB, RssFile "
              f"{fixed['rss_file_bytes'] / MIB:.1f} MiB", file=sys.stderr, flush=True)
    records = []
    stem = Path(args.out) if args.out else RESULTS / ("device_footprint" if args.configs == "headline"
                                                      else f"device_footprint_{args.configs}")
    with (contextlib.nullcontext(args.keep_programs) if args.keep_programs else tempfile.TemporaryDirectory()) as tmp:
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for name, spec in specs.items():
            for row in rows:
                t0 = time.perf_counter()
                if row.startswith("eager"):
                    rec = run_eager(args, name, row)
                elif row in NATIVE_OF:
                    rec = run_native(args, spec, row, Path(tmp), runner, fixed)
                else:
                    rec = run_et(args, spec, row, Path(tmp))
                rec["wall_seconds"] = round(time.perf_counter() - t0, 1)
                rec["provenance"] = prov
                records.append(rec)
                msg = rec.get("error", "")[:300] or (
                    f"RssAnon {rec['footprint_rss_anon_bytes'] / MIB:.1f} MiB, RssFile "
                    f"{rec['footprint_rss_file_bytes'] / MIB:.1f} MiB, {rec['seconds_per_step']:.3f} s/step")
                print(f"{name} {row}: {msg} [{rec['wall_seconds']} s]", file=sys.stderr, flush=True)
                write_results(args, prov, records, stem, partial=True, fixed=fixed)   # partial results kept
    write_results(args, prov, records, stem, fixed=fixed)


def write_results(args, prov: dict, records: list, stem: Path, partial: bool = False, fixed: dict | None = None,
                  ) -> None:
    """stem.json (every record, each with its own provenance, and the target summary); with the run complete also
    stem.md and stem.png."""
    res = {"provenance": prov, "threads": args.threads, "steps": args.steps, "records": records,
           "summary": summarize(records)}
    if fixed:
        res["native_fixed_cost"] = fixed
    if getattr(args, "lora_from", ""):
        src = json.loads(Path(args.lora_from).read_text())
        res["eager_lora_source"] = f"{args.lora_from} ({src.get('command', '')}, {src.get('date_utc', '')})"
        res["eager_lora"] = {r["config"]: {"cpu_seconds_per_step": r["cpu_seconds_per_step"],
                                           "seconds_per_step": r["seconds_per_step"], "flops": r.get("flops")}
                             for r in src["records"] if r.get("variant") == "lora"}
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    if not partial:
        write_report(res, stem)
        plot(res, stem)
        print(f"wrote {stem}.json / .md / .png", file=sys.stderr)


def row_remat(row: str) -> str:
    """The export's remat setting for an ExecuTorch row."""
    return "blocks" if row.endswith("_remat") else "none"


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
        rec["provenance"] = prov
        records.append(rec)
        print(f"{rec['config']} {rec['row']}: RssAnon {rec.get('footprint_rss_anon_bytes', 0) / MIB:.1f} MiB",
              file=sys.stderr, flush=True)
    prov = dict(prov, command=prov["command"] + f" (programs exported by: {old['provenance']['command']}, "
                f"{old['provenance']['date']})")
    write_results(args, prov, records, Path(args.out))


def merge(args, prov: dict) -> None:
    """One report from the rows of earlier runs: each record keeps its own provenance (command, machine, date: its
    file's, where the record has none of its own), the merged command names the sources, the native fixed cost is
    the latest file's that has one."""
    by_key, sources, fixed = {}, [], None
    for path in args.merge.split(","):
        res = json.loads(Path(path).read_text())
        sources.append(f"{res['provenance']['command']} ({res['provenance']['date']})")
        fixed = res.get("native_fixed_cost", fixed)
        for r in res["records"]:
            if not args.only or r["config"] in args.only.split(","):
                r.setdefault("provenance", res["provenance"])
                by_key[(r["config"], r["row"], backend_of(r) or "")] = r
    records = [by_key[k] for k in sorted(by_key, key=lambda k: (k[0], ROWS.index(k[1]), k[2] != "portable"))]
    prov = dict(prov, command=prov["command"] + " <- " + "; ".join(sources))
    write_results(args, prov, records, Path(args.out), fixed=fixed)


if __name__ == "__main__":
    main()
