"""Wall time of a compile whose programs the program cache (export/program_cache.py) holds, against the same compile
lowering every program.

    python benchmarks/program_cache.py     -> benchmarks/results/program_cache.{json,md}

Two requests, each a fresh `ditskip-edge compile` process, one torch thread per process: `make demo`'s
(`examples/recipe.py compile_args`: flux-testbed, 5 reference photos of the teal star, BlockSkip 50% by selection,
--generation, --jobs 2) and a flux-tiny model bundle (the subject stage's forward programs and the training step,
fp32, mapped weights). Per request, in this order: `--program-cache off`; then with a new, empty cache folder
(everything lowered and stored); then again with that folder (everything read); the demo's request once more with
the warm cache and --jobs 1 (with nothing to lower, is a second process still worth its start-up?). Per run: wall
seconds, and whether its .pte / .ptd files are byte for byte the first run's; per cache: its size on disk.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._meta import provenance, provenance_md, write_result   # noqa: E402


def program_files(bundle: Path) -> dict[str, str]:
    return {str(f.relative_to(bundle)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(bundle.rglob("*")) if f.suffix in (".pte", ".ptd")}


def compile_once(args: list[str], out: Path, cache: str, env: dict[str, str] | None = None
                 ) -> tuple[float, dict[str, str]]:
    """One `ditskip-edge compile` process (one torch thread, `env` added to the environment): (wall s, the program
    files' SHA-256s)."""
    cmd = [sys.executable, "-m", "compiler.cli", *args, "--out", str(out), "--force", "--program-cache", cache,
           "--json"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, program_files(out)


def demo_request(tmp: Path) -> list[str]:
    """`make demo`'s compile request (photos written under `tmp`), without --out / --force."""
    from testbed.scenes import SUBJECTS, subject_prompt, write_reference_photos
    from examples.demo import SUBJECT
    from examples.recipe import compile_args
    photos = tmp / "photos"
    write_reference_photos(SUBJECTS[SUBJECT], photos, 5, captions=True, described=True)   # as make demo
    demo = compile_args(subject_prompt(SUBJECTS[SUBJECT], described=True), photos, tmp / "unused")
    cut = demo.index("--out")
    return demo[:cut] + [a for a in demo[cut + 2:] if a != "--force"]


def requests(tmp: Path) -> dict[str, list[str]]:
    demo = demo_request(tmp)
    tiny = ["compile", "--model", "flux-tiny", "--prompt", "a photo of sks toy", "--skip-front", "1", "--skip-back",
            "2", "--precision", "fp32", "--subject-backend", "portable"]
    return {"make demo's compile (flux-testbed, --generation, --jobs 2)": demo,
            "flux-tiny model bundle (subject stage + training step, fp32)": tiny}


def to_markdown(doc: dict) -> str:
    lines = ["# The program cache: a compile lowering its programs vs reading them", "",
             provenance_md(doc["provenance"]), "", __doc__.split("\n\n")[2].replace("\n", " "), "",
             "| request | run | wall s | programs (.pte / .ptd files) | same bytes as `off` | cache MiB |",
             "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['request']} | {r['run']} | {r['wall_s']:.1f} | {r['program_files']} | "
                     f"{'yes' if r['same_bytes_as_off'] else 'NO'} | "
                     f"{'' if r['cache_mib'] is None else format(r['cache_mib'], '.1f')} |")
    lines += ["", doc["reading"], ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "program_cache"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, req in requests(tmp).items():
            cache = tmp / f"cache_{len(rows)}"
            first = None
            runs = [("off", "off", req), ("empty cache", str(cache), req), ("warm cache", str(cache), req)]
            if "--jobs" in req:
                jobs = req.index("--jobs") + 1
                runs.append(("warm cache, --jobs 1", str(cache), req[:jobs] + ["1"] + req[jobs + 1:]))
            for run, where, args_run in runs:
                wall, files = compile_once(args_run, tmp / "bundle", where)
                first = files if first is None else first
                size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.exists() else None
                rows.append({"request": name, "run": run, "wall_s": round(wall, 1), "program_files": len(files),
                             "same_bytes_as_off": files == first,
                             "cache_mib": None if size is None else round(size / 2**20, 2)})
                print(rows[-1], file=sys.stderr, flush=True)
    demo = [r for r in rows if r["request"].startswith("make demo")]
    reading = (f"make demo's compile: {demo[0]['wall_s']:.1f} s lowering every program, {demo[2]['wall_s']:.1f} s "
               f"reading them ({demo[0]['wall_s'] - demo[2]['wall_s']:.1f} s saved; what is left is the model "
               f"load, the selection, the residual cache and the second process's start-up). The run that stored "
               f"them: {demo[1]['wall_s'] - demo[0]['wall_s']:+.1f} s against `off` (one run of each). With the warm "
               f"cache --jobs 1 took {demo[3]['wall_s']:.1f} s against {demo[2]['wall_s']:.1f} s with --jobs 2. "
               f"Every run wrote the same program bytes: {all(r['same_bytes_as_off'] for r in rows)}.")
    doc = {"provenance": provenance(), "rows": rows, "reading": reading}
    print(write_result(doc, args.out, to_markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
