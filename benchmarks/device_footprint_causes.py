"""Why the ExecuTorch training program went above the eager step (issue 14): each cause, switched off one at a time,
with its size in bytes.

    nice -n 10 python benchmarks/device_footprint_causes.py --configs headline --only flux-layout-300m
    python benchmarks/device_footprint_causes.py --configs tiny --only flux-tiny          # minutes
    -> benchmarks/results/device_footprint_causes[_CONFIGS].{json,md}

A ladder of exports of the same step (BlockSkip 50%, int8 frozen weights, XNNPACK, LoRA rank 16, random weights),
each rung adding one fix to the one before (export/executorch_program.py's ExportConfig fields):

  L0 exporter as before issue 14   XNNPACK partitioner with all its ops, ExecuTorch's greedy memory plan, the node
                                   order lowering leaves, unsqueeze/squeeze copies around each bmm, constants in .pte
  L1 + restore_order               cause A: lowering re-sorts the graph (legalize_graph, not stable) and hoists
                                   every dequantization (and its backward recompute) to the start
  L2 + unsqueeze_as_view           cause C: bmm operands copied by unsqueeze_copy / squeeze_copy
  L3 + best-fit memory plan        cause B: greedy's fixed-size slots (same lifetimes, other placement)
  L4 + XNNPACK matmuls only        cause D: multi-op partitions keep all their inputs alive until the call and all
                                   their outputs from it (and run their internals in XNNPACK's own workspace)
  L5 + weights in a .ptd           frozen weights leave the .pte (file-backed either way when memory-mapped)
  L6 + block remat                 the activations of the kept blocks recomputed in backward
and, for the fp32 model, F: XNNPACK's packed copies of static fp32 weights (partitioner with all ops = weights
packed per partition, the unpacked original kept; matmul-only = weights reach bmm as runtime values, never packed).

Per rung: planned arena, its lower bound for the rung's lifetimes (memory_plan.lower_bound), greedy's arena for the
same lifetimes, and, in a fresh process that imports only the runtime (export/executorch_footprint.py), the step's
peak RssAnon / RssFile over the baseline before loading, and seconds per step (1 thread). A cause's size is the
change of the figure it acts on between its rung and the one before.
"""

from __future__ import annotations

import argparse
import copy
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
MIB = 1024 ** 2

LADDER = [
    ("L0", "exporter before issue 14", dict(restore_order=False, unsqueeze_as_view=False, memory_planner="greedy",
                                            xnnpack_ops="all")),
    ("L1", "+ node order restored (A)", dict(restore_order=True, unsqueeze_as_view=False, memory_planner="greedy",
                                              xnnpack_ops="all")),
    ("L2", "+ views for bmm operands (C)", dict(restore_order=True, unsqueeze_as_view=True, memory_planner="greedy",
                                                 xnnpack_ops="all")),
    ("L3", "+ best-fit memory plan (B)", dict(restore_order=True, unsqueeze_as_view=True, memory_planner="best",
                                               xnnpack_ops="all")),
    ("L4", "+ XNNPACK matmuls only (D)", dict(restore_order=True, unsqueeze_as_view=True, memory_planner="best",
                                               xnnpack_ops="matmul")),
    ("L5", "+ frozen weights in .ptd", dict(restore_order=True, unsqueeze_as_view=True, memory_planner="best",
                                             xnnpack_ops="matmul", external_weights=True)),
    ("L6", "+ block remat", dict(restore_order=True, unsqueeze_as_view=True, memory_planner="best",
                                 xnnpack_ops="matmul", external_weights=True, remat="blocks")),
]
PRECISION = {8: "int8", 4: "int4", 32: "fp32"}
FP32 = [("F0", "fp32, XNNPACK all ops (weights packed)", dict(xnnpack_ops="all", external_weights=True)),
        ("F1", "fp32, XNNPACK matmuls only (not packed)", dict(xnnpack_ops="matmul", external_weights=True))]


def build(spec, bits: int, rank: int):
    import torch
    from export.step_module import FlatTrainingStep, flatten_step_inputs
    from export.executorch_program import StepModule
    from memory_speed import step_config
    from ditskip_edge.memory_estimate.program import build_step_program
    from ditskip_edge.quantize import QUANT_LAYERS
    from ditskip_edge.training_step import TrainingStep
    cfg = replace(step_config(spec, "blockskip", rank), precision=PRECISION[bits], recompute_dequant=False)
    prog = build_step_program(cfg, device="cpu", seed=0)
    names, example = flatten_step_inputs(*prog.inputs)
    flat = FlatTrainingStep(TrainingStep(prog.module, torch.nn.Identity()), names).eval()
    return StepModule(flat, names, example, {}, prog.module.view,
                      sum(isinstance(m, QUANT_LAYERS) for m in flat.modules()))


def rung(step, joints: dict, fields: dict, bits: int, workdir: Path, tag: str, steps: int, threads: int) -> dict:
    """Export one rung (the joint graph of the same remat setting is exported once and copied) and measure it."""
    import torch
    from export.executorch_footprint import measure_program
    from export.executorch_memory import memory_report, traced_need
    from export.executorch_program import (ExportConfig, _data_files, _op_placement, backend_config, export_joint,
                                           lower)
    from ditskip_edge.quantize import QuantSpec
    cfg = ExportConfig(quant=QuantSpec(PRECISION[bits]), backend="xnnpack", **fields)
    t0 = time.perf_counter()
    if cfg.remat not in joints:
        joints[cfg.remat] = export_joint(step, cfg)
    ep, passes = joints[cfg.remat]
    passes = dict(passes)
    edge = lower(copy.deepcopy(ep), cfg, passes)
    ops = _op_placement(edge.exported_program())
    et = edge.to_executorch(backend_config(cfg))
    data = _data_files(et) if cfg.external_weights else {}
    out = workdir / tag
    out.mkdir(parents=True, exist_ok=True)
    pte = out / "train_step.pte"
    pte.write_bytes(et.buffer)
    data_path = None
    for name, blob in data.items():
        data_path = out / name
        data_path.write_bytes(blob)
    memory = memory_report(et, step, pte.stat().st_size, data, cfg)
    export_s = time.perf_counter() - t0
    inputs = out / "inputs.pt"
    torch.save(step.example, inputs)
    rec = {"export_config": {k: getattr(cfg, k) for k in ("restore_order", "unsqueeze_as_view", "memory_planner",
                                                          "xnnpack_ops", "external_weights", "remat")},
           "bits": bits, "memory": memory, "passes": passes, "export_seconds": round(export_s, 1),
           "xnnpack_delegates": ops["xnnpack_delegates"], "traced": traced_need(step, cfg)}
    try:
        rec["runtime"] = measure_program(pte, inputs, data=data_path, steps=steps, threads=threads)
        if cfg.external_weights and cfg.remat == "none":     # what the Python loader's default mlock holds
            rec["runtime_mlock"] = measure_program(pte, inputs, data=data_path, steps=2, threads=threads,
                                                   keep_mlock=True)
    except Exception as e:   # noqa: BLE001 - keep the export figures
        rec["runtime_error"] = str(e)[-1500:]
    return rec


def write_md(res: dict, stem: Path) -> None:
    from _meta import provenance_md
    f = lambda v: "" if v is None else f"{v / MIB:.1f}"  # noqa: E731
    lines = ["# What put the ExecuTorch program above the eager step: causes and sizes", "",
             provenance_md(res["provenance"]), "", __doc__.split("\n\n")[2].replace("\n", " "), "",
             "| rung | config | planned arena MiB | lower bound MiB | greedy on same lifetimes MiB | traced need MiB | "
             "step RssAnon MiB | step RssFile MiB | RssAnon - arena MiB | .pte MiB | s / step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rungs"]:
        m, rt = r["memory"], r.get("runtime", {})
        anon = rt.get("footprint_rss_anon_bytes")
        lines.append(f"| {r['rung']} {r['label']} | {r['config']} | {f(m['planned_arena_bytes'])} | "
                     f"{f(m['arena_lower_bound_bytes'])} | {f(m['arena_greedy_bytes'])} | "
                     f"{f(r['traced']['traced_equivalent_bytes'])} | {f(anon)} | "
                     f"{f(rt.get('footprint_rss_file_bytes'))} | "
                     f"{f(anon - m['planned_arena_bytes']) if anon is not None else ''} | {f(m['pte_bytes'])} | "
                     f"{rt.get('seconds_per_step', float('nan')):.3f} |")
    lines += ["", "## Causes, each with its size", "", "| cause | what it acts on | bytes | MiB |", "|---|---|---|---|"]
    for c in res["causes"]:
        lines.append(f"| {c['cause']} | {c['measure']} | {c['bytes']} | {c['bytes'] / MIB:.1f} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


def causes(rungs: list[dict]) -> list[dict]:
    by = {r["rung"]: r for r in rungs}
    out = []

    def arena(k):
        return by[k]["memory"]["planned_arena_bytes"] if k in by else None

    def anon(k):
        return by[k].get("runtime", {}).get("footprint_rss_anon_bytes") if k in by else None

    def add(cause, measure, a, b):
        if a is not None and b is not None:
            out.append({"cause": cause, "measure": measure, "bytes": int(a - b)})

    add("A: lowering re-sorts the graph, dequantized weights hoisted to the start", "planned arena L0 - L1",
        arena("L0"), arena("L1"))
    add("C: unsqueeze_copy / squeeze_copy around bmm operands", "planned arena L1 - L2", arena("L1"), arena("L2"))
    if "L2" in by:
        m = by["L2"]["memory"]
        add("B: greedy slots vs best-fit placement (same lifetimes)", "greedy arena - best-fit arena, L2 lifetimes",
            m["arena_greedy_bytes"], arena("L3"))
    add("D: multi-op XNNPACK partitions (inputs/outputs held across the call)", "planned arena L3 - L4", arena("L3"),
        arena("L4"))
    add("D': XNNPACK workspace and runtime state beyond the arena", "(RssAnon - arena) L3 - L4",
        (anon("L3") - arena("L3")) if anon("L3") is not None else None,
        (anon("L4") - arena("L4")) if anon("L4") is not None else None)
    add("weights to .ptd (mapped, not in RssAnon)", "step RssAnon L4 - L5", anon("L4"), anon("L5"))
    add("block remat", "planned arena L5 - L6", arena("L5"), arena("L6"))
    add("block remat", "step RssAnon L5 - L6", anon("L5"), anon("L6"))
    add("total", "step RssAnon L0 - L6", anon("L0"), anon("L6"))
    if "L5" in by and "runtime_mlock" in by["L5"]:
        out.append({"cause": "Python loader mlocks the mapped .pte / .ptd (VmLck; avoided by footprint.drop_mlock)",
                    "measure": "VmLck with the loader's default", "bytes": int(by["L5"]["runtime_mlock"]["locked_bytes"])})
    if "F0" in by and "F1" in by:
        add("F: XNNPACK packed copies of static fp32 weights (+ original kept)", "fp32 (RssAnon - arena) F0 - F1",
            anon("F0") - arena("F0") if anon("F0") is not None else None,
            anon("F1") - arena("F1") if anon("F1") is not None else None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="tiny")
    ap.add_argument("--only", default="")
    ap.add_argument("--rungs", default="L0,L1,L2,L3,L4,L5,L6,F0,F1")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from _meta import provenance
    from memory_speed import config_specs
    prov = provenance()
    specs = config_specs(args.configs)
    if args.only:
        specs = {k: v for k, v in specs.items() if k in args.only.split(",")}
    wanted = args.rungs.split(",")
    stem = Path(args.out) if args.out else RESULTS / ("device_footprint_causes" if args.configs == "headline"
                                                      else f"device_footprint_causes_{args.configs}")
    rungs = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in specs.items():
            for bits, ladder in ((8, LADDER), (32, FP32)):
                todo = [r for r in ladder if r[0] in wanted]
                if not todo:
                    continue
                step = build(spec, bits, args.rank)
                joints: dict = {}
                for key, label, fields in todo:
                    t0 = time.perf_counter()
                    rec = rung(step, joints, fields, bits, Path(tmp), f"{name}_{key}", args.steps, args.threads)
                    rec.update(rung=key, label=label, config=name, wall_seconds=round(time.perf_counter() - t0, 1))
                    rungs.append(rec)
                    rt = rec.get("runtime", {})
                    print(f"{name} {key}: arena {rec['memory']['planned_arena_bytes'] / MIB:.1f} MiB (lower bound "
                          f"{rec['memory']['arena_lower_bound_bytes'] / MIB:.1f}), RssAnon "
                          f"{rt.get('footprint_rss_anon_bytes', 0) / MIB:.1f} MiB, RssFile "
                          f"{rt.get('footprint_rss_file_bytes', 0) / MIB:.1f} MiB "
                          f"[{rec['wall_seconds']} s]", file=sys.stderr, flush=True)
                    res = {"provenance": prov, "rungs": rungs, "causes": causes(rungs)}
                    stem.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
                del step, joints
    write_md(res, stem)
    print(f"wrote {stem}.json / .md", file=sys.stderr)


if __name__ == "__main__":
    main()
