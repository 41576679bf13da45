"""What each XNNPACK delegate of a training program holds at run time, outside the planned arena.

    python benchmarks/delegate_state.py      -> benchmarks/results/delegate_state.{json,md}   (about 5 minutes)

The training programs have one small XNNPACK delegate per matmul chain, transpose and activation
(export/xnnpack_partition.py): 424 in flux-tiny's remat program, 1894 in the SANA layout's. Each delegate's runtime
(XNNPACK's runtime object, its operators and value tables, ExecuTorch's delegate handle) is anonymous memory the
planned arena does not contain, and the memory estimate did not count it: the tiny rows measured 5.5x / 8.1x their
estimates (benchmarks/results/device_footprint_tiny_after_fix*.md).

This measures it apart from any model: a training step over a chain of `n` links on 16 x 16 tensors with one trained
16 x 16 weight, exported as the training programs are (export/executorch_program.lower: one XNNPACK delegate per
matmul chain / single op; or portable kernels only), for two chain lengths per kind of link; the footprint (RssAnon
over the loaded runtime's baseline, peak of a step, export/executorch_footprint.py) minus the planned arena is
fitted as bytes per instruction of the method (every kernel or delegate call, move and free) plus bytes per
XNNPACK delegate:

    matmul            x = x @ w, XNNPACK     (forward bmm; backward: two bmm and their transposes)
    softmax           x = softmax(x @ w)     (adds a softmax delegate and the portable softmax backward)
    matmul_portable   x = x @ w, portable    (no delegate: the per-instruction state alone)

The two coefficients are the program state the estimate adds (ditskip_edge/memory_estimate/memory.py
PROGRAM_STATE_BYTES_PER_INSTRUCTION / _PER_DELEGATE).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"
KIB = 1024
WIDTH = 16
ACTIVATIONS = {"matmul": None, "softmax": lambda x: torch.softmax(x, -1)}
KINDS = {"matmul": ("matmul", "xnnpack"), "softmax": ("softmax", "xnnpack"), "matmul_portable": ("matmul", "portable")}


class Chain(nn.Module):
    def __init__(self, n: int, kind: str):
        super().__init__()
        self.n, self.act = n, ACTIVATIONS[kind]
        self.w = nn.Parameter(torch.eye(WIDTH) + 0.01 * torch.randn(WIDTH, WIDTH, generator=torch.Generator()
                                                                     .manual_seed(0)))

    def forward(self, x):
        for _ in range(self.n):
            x = x @ self.w
            if self.act is not None:
                x = self.act(x)
        return (x * x).mean()


def export_chain(n: int, kind: str, out: Path) -> dict:
    from torch.export.experimental import _export_forward_backward

    from export import graph_passes
    from export.executorch_memory import method_instructions
    from export.executorch_program import ExportConfig, backend_config, lower, _op_placement
    link, backend = KINDS[kind]
    cfg = ExportConfig(backend=backend, trace_need=False)
    x = torch.randn(WIDTH, WIDTH, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ep = torch.export.export(Chain(n, link), (x,), strict=False)
    ep = _export_forward_backward(ep)
    graph_passes.addmm_to_mm_add(ep)
    if backend == "xnnpack":
        graph_passes.mm_to_bmm(ep)
    edge = lower(ep, cfg)
    ops = _op_placement(edge.exported_program())
    et = edge.to_executorch(backend_config(cfg))
    pte = out / f"{kind}_{n}.pte"
    pte.write_bytes(et.buffer)
    torch.save([x], out / f"{kind}_{n}.inputs.pt")
    arena = sum(int(s) for s in et.executorch_program.execution_plan[0].non_const_buffer_sizes)
    return {"pte": str(pte), "inputs": str(out / f"{kind}_{n}.inputs.pt"), "delegates": ops["xnnpack_delegates"],
            "instructions": method_instructions(et),
            "planned_arena_bytes": arena, "pte_bytes": len(et.buffer)}


def fit_state(rows: list[dict]) -> dict:
    """beyond_arena = b * instructions + a * delegates + c, least squares over every row."""
    import numpy as np
    x = np.array([[r["instructions"], r["delegates"], 1.0] for r in rows])
    y = np.array([r["beyond_arena_bytes"] for r in rows], dtype=float)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return {"bytes_per_instruction": round(float(coef[0])), "bytes_per_delegate": round(float(coef[1])),
            "bytes_constant": round(float(coef[2])), "worst_residual_bytes": round(float(np.abs(x @ coef - y).max()))}


def main() -> None:
    from _meta import provenance, provenance_md
    from export.executorch_footprint import measure_program
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="40,160")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--out", default=str(RESULTS / "delegate_state"))
    a = ap.parse_args()
    lengths = [int(v) for v in a.lengths.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in a.kinds.split(","):
            for n in lengths:
                rec = export_chain(n, kind, Path(tmp))
                m = measure_program(rec["pte"], rec["inputs"], steps=3, threads=1)
                rec.update(kind=kind, n=n, load_rss_anon_bytes=m["load_rss_anon_bytes"],
                           footprint_rss_anon_bytes=m["footprint_rss_anon_bytes"],
                           beyond_arena_bytes=m["footprint_rss_anon_bytes"] - rec["planned_arena_bytes"])
                print(f"{kind} n={n}: {rec['delegates']} delegates, RssAnon {m['footprint_rss_anon_bytes'] / KIB:.0f}"
                      f" KiB, arena {rec['planned_arena_bytes'] / KIB:.0f} KiB", file=sys.stderr)
                rows.append(rec)
    slopes = {}
    for kind in a.kinds.split(","):
        lo, hi = [r for r in rows if r["kind"] == kind][0], [r for r in rows if r["kind"] == kind][-1]
        slopes[kind] = {k: round((hi[f] - lo[f]) / (hi["instructions"] - lo["instructions"]))
                        for k, f in (("bytes_per_instruction", "beyond_arena_bytes"),
                                     ("load_bytes_per_instruction", "load_rss_anon_bytes"))}
    fit = fit_state(rows)
    prov = provenance()
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps({"provenance": prov, "rows": rows, "slopes": slopes, "fit": fit},
                                                   indent=1))
    lines = ["# Runtime state per XNNPACK delegate (training programs)", "", provenance_md(prov), "",
             __doc__.split("\n\n")[2].replace("\n", " "), "",
             "RssAnon is what a phone counts (over the baseline of the loaded runtime, peak of a step); 'beyond "
             "arena' subtracts the planned arena.", "",
             "| kind | links | XNNPACK delegates | instructions | planned arena KiB | RssAnon KiB | beyond arena KiB | "
             "load RssAnon KiB |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['n']} | {r['delegates']} | {r['instructions']} | "
                     f"{r['planned_arena_bytes'] / KIB:.1f} | "
                     f"{r['footprint_rss_anon_bytes'] / KIB:.0f} | {r['beyond_arena_bytes'] / KIB:.0f} | "
                     f"{r['load_rss_anon_bytes'] / KIB:.0f} |")
    lines += ["", "Slope per instruction between the two lengths of each kind (an XNNPACK program's instructions are "
              "mostly delegate calls):", "",
              "| kind | RssAnon per instruction (KiB) | of which at load (KiB) |", "|---|---|---|"]
    for k, s in slopes.items():
        lines.append(f"| {k} | {s['bytes_per_instruction'] / KIB:.2f} | {s['load_bytes_per_instruction'] / KIB:.2f} |")
    lines += ["", f"Least squares over all rows: beyond arena = {fit['bytes_per_instruction']} B x instructions + "
              f"{fit['bytes_per_delegate']} B x XNNPACK delegates + {fit['bytes_constant']} B (worst row off by "
              f"{fit['worst_residual_bytes'] / KIB:.0f} KiB). The estimate (ditskip_edge/memory_estimate/memory.py "
              "PROGRAM_STATE_BYTES_PER_*) uses the two coefficients."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(json.dumps(slopes))


if __name__ == "__main__":
    main()
