"""ONNX Runtime Training: does recomputation in the training graph lower a step's footprint? (issue 14, ORT side)

    nice -n 10 python benchmarks/ort_recompute.py --configs headline --only flux-layout-300m
    python benchmarks/ort_recompute.py --configs tiny --only flux-tiny
    -> benchmarks/results/ort_recompute[_CONFIGS].{json,md}

The BlockSkip 50% step (int8 frozen weights, LoRA rank 16, random weights) exported as export/ort_export.py does
(TorchScript exporter, generate_artifacts), then the training model rewritten by export/ort_graph.py:

  base              as generate_artifacts writes it: the MatMul / Gemm gradients read the forward's dequantized
                    weights, which the session keeps alive from forward to backward
  recompute_frozen  recompute_frozen_in_gradient: the gradient reads a recomputed dequantization
  remat_blocks      rematerialize_blocks_onnx (blocks from the exporter's scoped node names) + recompute_frozen

each run with ORT's CommonSubexpressionElimination on (a default session) and off (ort_graph.RECOMPUTE_SESSION_
CONFIG), and with ORT's CPU memory arena on (default) and off, in a fresh process without torch
(export/ort_footprint.py): step peak RssAnon over the baseline before the session is created (frozen weights, fed
from the checkpoint state, are inside it), seconds per step (forward + backward, 1 thread), node counts of the
session's optimized graph (CSE merging copies shows as fewer nodes), and where ORT's execution order puts the
copies: for each copied node, how many nodes run between it and its first reader in the optimized graph (ORT saves
it in execution order).
"""

from __future__ import annotations

import argparse
import json
import statistics
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


def export(spec, rank: int, out: Path) -> tuple[Path, set[str], Path]:
    import numpy as np
    from export.ort_artifacts import generate_training_artifacts
    import torch
    from export.ort_graph import OPSET, export_step_onnx
    from export.step_module import FlatTrainingStep, flatten_step_inputs
    from memory_speed import step_config
    from ditskip_edge.memory_estimate.program import build_step_program
    from ditskip_edge.training_step import TrainingStep
    cfg = replace(step_config(spec, "blockskip", rank), precision="int8", recompute_dequant=False)
    prog = build_step_program(cfg, device="cpu", seed=0)
    names, example = flatten_step_inputs(*prog.inputs)
    flat = FlatTrainingStep(TrainingStep(prog.module, torch.nn.Identity()), names).eval()
    model = export_step_onnx(flat, example, names, out / "step.onnx", prog.module.view, OPSET)
    inits = {i.name for i in model.graph.initializer}
    trainable = [n for n, p in prog.module.view.named_parameters() if p.requires_grad and n in inits]
    generate_training_artifacts(model, trainable, out / "art")
    np.savez(out / "inputs.npz", **{f"i{k:03d}": v.detach().numpy() for k, v in enumerate(example)})
    return out / "art", inits - set(trainable), out / "inputs.npz"


def distances(optimized: Path, marker: str) -> dict:
    """Nodes between each copy (name contains `marker`) and its first reader, in ORT's execution order."""
    import onnx
    nodes = list(onnx.load(str(optimized), load_external_data=False).graph.node)
    first = {}
    for i, n in enumerate(nodes):
        for x in n.input:
            first.setdefault(x, i)
    gaps = [min(first.get(o, i) for o in n.output) - i for i, n in enumerate(nodes) if marker in n.name]
    if not gaps:
        return {}
    return {"copies": len(gaps), "median_gap": statistics.median(gaps), "max_gap": max(gaps),
            "copies_in_first_tenth": sum(1 for i, n in enumerate(nodes) if marker in n.name and i < len(nodes) / 10),
            "nodes": len(nodes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="tiny")
    ap.add_argument("--only", default="")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import onnx
    from _meta import provenance, provenance_md
    from export.ort_footprint import measure_training_model
    from export.ort_graph import RECOMPUTE_SESSION_CONFIG, recompute_frozen_in_gradient, rematerialize_blocks_onnx
    from memory_speed import config_specs
    prov = provenance()
    specs = config_specs(args.configs)
    if args.only:
        specs = {k: v for k, v in specs.items() if k in args.only.split(",")}
    stem = Path(args.out) if args.out else RESULTS / ("ort_recompute" if args.configs == "headline"
                                                      else f"ort_recompute_{args.configs}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in specs.items():
            t0 = time.perf_counter()
            art, frozen, inputs = export(spec, args.rank, Path(tmp) / name)
            export_s = time.perf_counter() - t0
            for variant in ("base", "recompute_frozen", "remat_blocks"):
                model = onnx.load(str(art / "training_model.onnx"))
                passes = {}
                if variant == "remat_blocks":
                    passes["remat"] = rematerialize_blocks_onnx(model, frozen)
                if variant != "base":
                    passes["recompute_frozen"] = recompute_frozen_in_gradient(model, frozen)
                path = art / f"training_model_{variant}.onnx"
                onnx.save(model, str(path))
                for cse in (True, False):
                    if variant == "base" and not cse:
                        continue
                    for arena in (True, False):
                        cfg = {} if cse else dict(RECOMPUTE_SESSION_CONFIG)
                        cfg["so:enable_cpu_mem_arena"] = arena
                        try:
                            r = measure_training_model(path, art / "checkpoint", inputs, cfg, steps=args.steps)
                        except Exception as e:   # noqa: BLE001 - keep the other rows
                            rows.append({"config": name, "variant": variant, "cse": cse, "arena": arena,
                                         "error": str(e)[-800:]})
                            continue
                        marker = "_remat" if variant == "remat_blocks" else "_recompute"
                        row = {"config": name, "variant": variant, "cse": cse, "arena": arena, "passes": passes,
                               "nodes_in_file": len(model.graph.node), "export_seconds": round(export_s, 1),
                               "placement": distances(Path(str(path)).with_suffix(".optimized.onnx"), marker),
                               **{k: r[k] for k in ("footprint_rss_anon_bytes", "footprint_rss_file_bytes",
                                                     "load_rss_anon_bytes", "seconds_per_step", "loss",
                                                     "optimized_nodes", "grad_norms")},
                               "optimized_cast_nodes": r["optimized_ops"].get("Cast", 0)}
                        rows.append(row)
                        print(f"{name} {variant} cse={'on' if cse else 'off'} arena={'on' if arena else 'off'}: "
                              f"RssAnon {row['footprint_rss_anon_bytes'] / MIB:.1f} MiB, nodes "
                              f"{row['optimized_nodes']}, {row['seconds_per_step']:.3f} s", file=sys.stderr,
                              flush=True)
                        stem.with_suffix(".json").write_text(json.dumps({"provenance": prov, "rows": rows},
                                                                        indent=1, default=str))
    lines = ["# ONNX Runtime Training: recomputation in the training graph", "", provenance_md(prov), "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             "| config | training model | CSE | CPU arena | step RssAnon MiB | nodes in file / after ORT's optimizer | "
             "Cast nodes after optimizer | copies: median / max nodes to first reader, in first tenth | s / step | "
             "loss |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['config']} | {r['variant']} | {r['cse']} | {r['arena']} | failed: "
                         f"`{r['error'][:120]}` | | | | | |")
            continue
        p = r["placement"]
        place = f"{p['median_gap']} / {p['max_gap']}, {p['copies_in_first_tenth']} of {p['copies']}" if p else ""
        lines.append(f"| {r['config']} | {r['variant']} | {'on' if r['cse'] else 'off'} | "
                     f"{'on' if r['arena'] else 'off'} | {r['footprint_rss_anon_bytes'] / MIB:.1f} | "
                     f"{r['nodes_in_file']} / {r['optimized_nodes']} | {r['optimized_cast_nodes']} | {place} | "
                     f"{r['seconds_per_step']:.3f} | {r['loss']:.6f} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {stem}.json / .md", file=sys.stderr)


if __name__ == "__main__":
    main()
