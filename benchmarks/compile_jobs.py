"""Wall time of the demo's compile with one process against two (`compile --jobs 2`: the generation programs
exported by a second process while the residual cache is computed).

    python benchmarks/compile_jobs.py --repeats 3     -> benchmarks/results/compile_jobs.{json,md}

The request is `make demo`'s (`examples/recipe.py compile_args`: flux-testbed, 5 reference photos of the teal star,
BlockSkip 50% by selection, its steps x 4 samples, --generation). Runs alternate (jobs 1, jobs 2, jobs 1, ...) so
that a drift of the machine falls on both. Each run is a fresh `ditskip-edge compile` process; jobs 1 runs with one
torch thread (as the demo does), jobs 2 with two (split one per process). Wall seconds, and the process tree's CPU
seconds (user + system).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result   # noqa: E402


def compile_once(photos: Path, out: Path, jobs: int) -> dict:
    from testbed.scenes import SUBJECTS, subject_prompt
    from examples.demo import SUBJECT
    from examples.recipe import compile_args
    cmd = [sys.executable, "-m", "compiler.cli",
           *compile_args(subject_prompt(SUBJECTS[SUBJECT], described=True), photos, out, jobs), "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": str(jobs), "DITSKIP_EDGE_PROGRAM_CACHE": "off"}   # lower every run
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"jobs": jobs, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def to_markdown(doc: dict) -> str:
    lines = ["# compile --jobs 1 vs 2 (the demo's compile request)", "", provenance_md(doc["provenance"]), "",
             "| jobs | runs | wall s (median) | wall s (each) | CPU s (median) |", "|---|---|---|---|---|"]
    for jobs, s in doc["summary"].items():
        lines.append(f"| {jobs} | {s['runs']} | {s['wall_s_median']:.1f} | "
                     f"{', '.join(f'{w:.1f}' for w in s['wall_s'])} | {s['cpu_s_median']:.1f} |")
    lines += ["", doc["reading"], ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compile_jobs"))
    args = ap.parse_args()
    from testbed.scenes import SUBJECTS, write_reference_photos
    from examples.demo import SUBJECT
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        photos = Path(tmp) / "photos"
        write_reference_photos(SUBJECTS[SUBJECT], photos, 5, captions=True, described=True)   # as make demo
        for rep in range(args.repeats):
            for jobs in (1, 2):
                runs.append(compile_once(photos, Path(tmp) / "bundle", jobs))
                print(f"repeat {rep} jobs {jobs}: {runs[-1]}", file=sys.stderr)
    summary = {}
    for jobs in (1, 2):
        rs = [r for r in runs if r["jobs"] == jobs]
        summary[str(jobs)] = {"runs": len(rs), "wall_s": [r["wall_s"] for r in rs],
                              "wall_s_median": statistics.median(r["wall_s"] for r in rs),
                              "cpu_s_median": statistics.median(r["cpu_s"] for r in rs)}
    w1, w2 = summary["1"]["wall_s_median"], summary["2"]["wall_s_median"]
    reading = (f"Median wall: jobs 1 {w1:.1f} s, jobs 2 {w2:.1f} s ({w1 - w2:+.1f} s saved by the second process). "
               f"CPU seconds rise with two processes (a second interpreter imports torch, diffusers and ExecuTorch "
               f"and builds the model again, and two processes share the cores).")
    doc = {"provenance": provenance(), "runs": runs, "summary": summary, "reading": reading}
    print(write_result(doc, args.out, to_markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
