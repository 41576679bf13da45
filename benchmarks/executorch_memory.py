"""Variant 7: the BlockSkip step as an ExecuTorch training program (issue 5's exporter), planned and measured.

    python benchmarks/executorch_memory.py --configs tiny [--backend xnnpack]
    -> benchmarks/results/executorch_memory[_CONFIGS].{json,md}

For each config of memory_speed.py and bits in (32, 8, 4): build the BlockSkip step (50% skip, train resolution,
random weights; ditskip_edge/memory_estimate/program.py), export it with export.executorch_program.export_training_program (joint
forward-backward, its graph passes: frozen chains recomputed in backward), then in a FRESH process that imports only
the ExecuTorch runtime: load the program, run warm-up + N forward_backward calls, and read peak RSS. Reported:
planned arena (the memory planner's non-constant buffers), constants (frozen weights in the program), .pte size,
runtime step RSS (peak RSS - RSS after importing the runtime) and seconds per forward_backward. The runtime RSS
holds the loaded program (constants) + arena + inputs; AdamW states (2 x LoRA, held by the trainer) are not in it.
The memory estimate's math-attention prediction for the same step is shown beside it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
MIB = 1024 ** 2
PRECISION = {32: "fp32", 8: "int8", 4: "int4"}     # --bits -> the frozen weights' precision


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def runtime_child(pte: str, inputs: str, steps: int) -> None:
    import torch
    from executorch.extension.training import _load_for_executorch_for_training
    tensors = list(torch.load(inputs, weights_only=True))
    base = rss_bytes()
    m = _load_for_executorch_for_training(pte)
    loaded = rss_bytes()
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        loss = m.forward_backward("forward", tensors)[0]
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"rss_baseline_bytes": base, "rss_after_load_bytes": loaded, "peak_rss_bytes": peak,
                      "runtime_step_rss_bytes": peak - base, "seconds_per_step": sorted(times[1:])[len(times[1:]) // 2],
                      "loss": float(loss)}))


def export_one(spec, bits: int, backend: str, rank: int, workdir: Path) -> dict:
    import torch
    from export.step_module import FlatTrainingStep, flatten_step_inputs
    from export.executorch_program import ExportConfig, StepModule, export_training_program
    from ditskip_edge.memory_estimate.memory import MemoryEstimate, trace_step
    from ditskip_edge.memory_estimate.program import build_step_program
    from ditskip_edge.quantize import QUANT_LAYERS, QuantSpec
    from ditskip_edge.training_step import TrainingStep
    from memory_speed import step_config
    precision = PRECISION[bits]
    cfg = replace(step_config(spec, "blockskip", rank), precision=precision, recompute_dequant=False)
    prog = build_step_program(cfg, device="cpu")
    names, example = flatten_step_inputs(*prog.inputs)
    flat = FlatTrainingStep(TrainingStep(prog.module, torch.nn.Identity()), names).eval()
    transformer = prog.module.view          # parameters are shared with the transformer
    step = StepModule(flat, names, example, {}, transformer,
                      sum(isinstance(m, QUANT_LAYERS) for m in flat.modules()))
    t0 = time.perf_counter()
    program = export_training_program(step, ExportConfig(quant=QuantSpec(precision),
                                                          backend=backend))
    export_s = time.perf_counter() - t0
    pte = workdir / f"{spec.name}_{bits}.pte"
    pte.write_bytes(program.buffer)
    inputs = workdir / f"{spec.name}_{bits}.inputs.pt"
    torch.save(example, inputs)
    del program.buffer
    planned = MemoryEstimate.from_trace(trace_step(cfg, attention="math", count_flops=False), 0)
    return {"config": spec.name, "bits": bits, "backend": backend, "export_seconds": round(export_s, 1),
            "memory": program.memory, "passes": program.passes, "pte": str(pte), "inputs": str(inputs),
            "estimate_math": planned.to_json()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="tiny")
    ap.add_argument("--only", default="", help="comma-separated config names")
    ap.add_argument("--bits", default="32,8,4")
    ap.add_argument("--backend", default="xnnpack", choices=["portable", "xnnpack"])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--out", default=None, help="results stem (default benchmarks/results/executorch_memory[_CONFIGS])")
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return runtime_child(args.child[0], args.child[1], args.steps)
    from memory_speed import MALLOC_ENV, config_specs, machine
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    specs = config_specs(args.configs)
    if args.only:
        specs = {k: v for k, v in specs.items() if k in args.only.split(",")}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in specs.items():
            for bits in [int(b) for b in args.bits.split(",")]:
                try:
                    row = export_one(spec, bits, args.backend, args.rank, Path(tmp))
                except Exception as e:   # noqa: BLE001 - report the gap, keep the other rows
                    rows.append({"config": name, "bits": bits, "error": f"{type(e).__name__}: {e}"[:500]})
                    print(f"{name} {bits}: export failed: {e}", file=sys.stderr, flush=True)
                    continue
                out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child", row["pte"],
                                      row["inputs"]], capture_output=True, text=True,
                                     env=dict(os.environ, PYTHONPATH=str(ROOT), **MALLOC_ENV))
                if out.returncode:
                    row["error"] = out.stderr[-500:]
                else:
                    row["runtime"] = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(row)
                mem, rt = row["memory"], row.get("runtime", {})
                print(f"{name} bits {bits}: arena {mem['planned_arena_bytes'] / MIB:.1f} MiB, constants "
                      f"{mem['constant_bytes'] / MIB:.1f} MiB, runtime step RSS "
                      f"{rt.get('runtime_step_rss_bytes', 0) / MIB:.1f} MiB, {rt.get('seconds_per_step', 0):.3f} s",
                      file=sys.stderr, flush=True)
    res = {"command": "python " + " ".join(sys.argv), "date_utc": started, "machine": machine(), "rows": rows}
    stem = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        "executorch_memory" if args.configs == "headline" else f"executorch_memory_{args.configs}")
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    m = res["machine"]
    lines = ["# Variant 7: the BlockSkip step as an ExecuTorch training program", "",
             f"- command: `{res['command']}` (date {started} UTC); machine: {m['nproc']} CPUs ({m['cpu']}), "
             f"{m['ram_gib']} GiB RAM", "- " + __doc__.split("\n\n")[2].replace("\n", " "), "",
             "| config | bits | backend | planned arena MiB | constants MiB | .pte MiB | runtime step RSS MiB | "
             "estimate (math attention) arena MiB / step MiB | s / forward_backward |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "memory" not in r:
            lines.append(f"| {r['config']} | {r['bits']} | | failed: `{r['error'][:200]}` | | | | | |")
            continue
        mem, rt, pl = r["memory"], r.get("runtime", {}), r["estimate_math"]
        lines.append(f"| {r['config']} | {r['bits']} | {r['backend']} | {mem['planned_arena_bytes'] / MIB:.1f} | "
                     f"{mem['constant_bytes'] / MIB:.1f} | {mem['pte_bytes'] / MIB:.1f} | "
                     f"{rt.get('runtime_step_rss_bytes', float('nan')) / MIB:.1f} | "
                     f"{pl['activation_arena_bytes'] / MIB:.1f} / {pl['peak_bytes'] / MIB:.1f} | "
                     f"{rt.get('seconds_per_step', float('nan')):.3f} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {stem}.json / .md", file=sys.stderr)


if __name__ == "__main__":
    main()
