"""Compile wall time with XNNPACK's preprocess passes pruned (export/lowering.py `pruned_xnnpack_passes`, the
default) against every pass on every partition ($DITSKIP_EDGE_XNNPACK_ALL_PASSES=1), and whether the programs'
bytes are the same.

    python benchmarks/xnnpack_pass_pruning.py     -> benchmarks/results/xnnpack_pass_pruning.{json,md}

Per request, fresh `ditskip-edge compile` processes with `--program-cache off` (every program lowered), one torch
thread each, in the order all passes, pruned, pruned, all passes (this machine's speed drifts within minutes, so
each variant's two runs sit on both sides of the other's): a flux-tiny and a sana-tiny model bundle with the
training step on XNNPACK (`--xnnpack`, int8: one delegate per matmul chain) and the subject stage's forward programs
(XNNPACK, rounding-only ops), and `make demo`'s compile (`examples/demo.py compile_args`: flux-testbed, --generation,
--jobs 2; its training step is portable, the generation programs' XNNPACK partitions few). Per run: wall seconds
and whether every .pte / .ptd file is byte for byte the first run's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result   # noqa: E402
from benchmarks.program_cache import compile_once, demo_request        # noqa: E402
from export.lowering import ENV_ALL_PASSES                              # noqa: E402

ORDER = ("all passes", "pruned", "pruned", "all passes")


def requests(tmp: Path) -> dict[str, list[str]]:
    model = ["--prompt", "a photo of sks toy", "--skip-front", "1", "--skip-back", "2", "--precision", "int8",
             "--runtime", "executorch", "--xnnpack"]
    return {"flux-tiny model bundle (XNNPACK training step + subject stage)": ["compile", "--model", "flux-tiny",
                                                                              *model],
            "sana-tiny model bundle (XNNPACK training step + subject stage)": ["compile", "--model", "sana-tiny",
                                                                              *model],
            "make demo's compile (flux-testbed, --generation, --jobs 2)": demo_request(tmp)}


def to_markdown(doc: dict) -> str:
    lines = ["# XNNPACK's preprocess passes pruned per partition vs every pass", "",
             provenance_md(doc["provenance"]), "", __doc__.split("\n\n")[2].replace("\n", " "), "",
             "| request | run | wall s | programs (.pte / .ptd files) | same bytes as the first run |",
             "|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['request']} | {r['run']} | {r['wall_s']:.1f} | {r['program_files']} | "
                     f"{'yes' if r['same_bytes'] else 'NO'} |")
    lines += ["", "| request | all passes, mean s | pruned, mean s | saved |", "|---|---|---|---|"]
    for s in doc["summary"]:
        lines.append(f"| {s['request']} | {s['all_passes_s']:.1f} | {s['pruned_s']:.1f} | {s['saved_pct']:.0f}% |")
    lines += ["", doc["reading"], ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "xnnpack_pass_pruning"))
    args = ap.parse_args()
    rows, summary = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, req in requests(tmp).items():
            first = None
            for run in ORDER:
                wall, files = compile_once(req, tmp / "bundle", "off",
                                           env={ENV_ALL_PASSES: "1" if run == "all passes" else "0"})
                first = files if first is None else first
                rows.append({"request": name, "run": run, "wall_s": round(wall, 1), "program_files": len(files),
                             "same_bytes": files == first})
                print(rows[-1], file=sys.stderr, flush=True)
            mine = [r for r in rows if r["request"] == name]
            full = statistics.mean(r["wall_s"] for r in mine if r["run"] == "all passes")
            pruned = statistics.mean(r["wall_s"] for r in mine if r["run"] == "pruned")
            summary.append({"request": name, "all_passes_s": round(full, 1), "pruned_s": round(pruned, 1),
                            "saved_pct": round(100 * (1 - pruned / full), 1)})
    same = all(r["same_bytes"] for r in rows)
    reading = ("Compile wall time saved by pruning: " + "; ".join(f"{s['request']}: {s['all_passes_s']:.1f} -> "
                                                                  f"{s['pruned_s']:.1f} s ({s['saved_pct']:.0f}%)"
                                                                  for s in summary)
               + f" (means of two runs each). Every run wrote the same program bytes: {same}.")
    doc = {"provenance": provenance(), "rows": rows, "summary": summary, "reading": reading}
    print(write_result(doc, args.out, to_markdown))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
