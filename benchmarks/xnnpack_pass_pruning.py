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
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result   # noqa: E402
from benchmarks.program_cache import program_files                     # noqa: E402
from export.lowering import ENV_ALL_PASSES                              # noqa: E402

ORDER = ("all passes", "pruned", "pruned", "all passes")


def compile_once(args: list[str], out: Path, all_passes: bool) -> tuple[float, dict[str, str]]:
    cmd = [sys.executable, "-m", "ditskip_edge.cli", *args, "--out", str(out), "--force", "--program-cache", "off",
           "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", ENV_ALL_PASSES: "1" if all_passes else "0"}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, program_files(out)


def requests(tmp: Path) -> dict[str, list[str]]:
    from benchmarks.testbed.scenes import SUBJECTS, subject_prompt, write_reference_photos
    from examples.demo import SUBJECT, compile_args
    photos = tmp / "photos"
    write_reference_photos(SUBJECTS[SUBJECT], photos, 5, captions=True, described=True)   # as make demo
    demo = compile_args(subject_prompt(SUBJECTS[SUBJECT], described=True), photos, tmp / "unused")
    cut = demo.index("--out")
    demo = demo[:cut] + [a for a in demo[cut + 2:] if a != "--force"]
    model = ["--prompt", "a photo of sks toy", "--skip-front", "1", "--skip-back", "2", "--precision", "int8",
             "--runtime", "executorch", "--xnnpack"]
    return {"flux-tiny model bundle (XNNPACK training step + subject stage)": ["compile", "--model", "flux-tiny",
                                                                              *model],
            "sana-tiny model bundle (XNNPACK training step + subject stage)": ["compile", "--model", "sana-tiny",
                                                                              *model],
            "make demo's compile (flux-testbed, --generation, --jobs 2)": demo}


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
                wall, files = compile_once(req, tmp / "bundle", all_passes=run == "all passes")
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
