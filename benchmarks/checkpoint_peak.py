"""The native trainer's footprint around its checkpoint write: two builds of `ditskip-run` train the same subject bundle
for the same steps, each sampled every 5 ms from outside (device_tests/native_runtime.py measure: the whole process's
RssAnon, dirty anonymous memory, what a phone counts). The checkpoint is written at the end of the run, so the peak
"before the last second" is the training steps' and the whole-run peak includes the checkpoint write.

    python benchmarks/checkpoint_peak.py BUNDLE --build before=PATH/ditskip-run --build after=PATH/ditskip-run \
        [--steps 2] [--out benchmarks/results/checkpoint_peak]

Used for issue 56 item 4 (benchmarks/results/native_stages.md found the write held about 6x the LoRA's bytes) on the
FLUX 288M layout's subject bundle that benchmarks/native_stages.py writes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _meta import provenance, provenance_md, write_result  # noqa: E402
from device_tests.native_runtime import Runner, measure  # noqa: E402


def measure_build(binary: Path, bundle: Path, steps: int) -> dict:
    run = Path(tempfile.mkdtemp(prefix="ckpt_peak_"))
    try:
        m = measure(Runner("x86_64", binary), "train", bundle, "--steps", steps, "--run-dir", run, "--no-resume", "--json")
        if m.returncode != 0:
            return {"rc": m.returncode, "stderr": m.stderr[-500:]}
        end = m.timeline[-1][0]
        return {"rc": 0, "rss_anon_peak_bytes": max(a for _, a, _ in m.timeline),
                "rss_anon_peak_before_last_second_bytes": max(a for t, a, _ in m.timeline if t < end - 1.0),
                "losses": json.loads(m.stdout)["losses"],
                "checkpoint_sha256": hashlib.sha256((run / "checkpoint.safetensors").read_bytes()).hexdigest()}
    finally:
        shutil.rmtree(run, ignore_errors=True)


def markdown(doc: dict) -> str:
    mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
    lines = ["# The native trainer's peak around its checkpoint write", "", provenance_md(doc["provenance"]),
             f"Bundle: `{doc['bundle']}`, {doc['steps']} steps; RssAnon of the whole `ditskip-run` process, sampled "
             f"every 5 ms (nothing subtracted).", "",
             "| build | RssAnon peak MiB (whole run) | RssAnon peak MiB (before the last second: the steps) | losses | "
             "checkpoint SHA-256 |", "|---|---|---|---|---|"]
    for label, r in doc["builds"].items():
        if r["rc"]:
            lines.append(f"| {label} | failed (rc {r['rc']}) | | | |")
            continue
        lines.append(f"| {label} | {mib(r['rss_anon_peak_bytes'])} | {mib(r['rss_anon_peak_before_last_second_bytes'])} "
                     f"| {r['losses']} | {r['checkpoint_sha256'][:16]} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--build", action="append", required=True, help="LABEL=PATH to a ditskip-run binary")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/checkpoint_peak"))
    a = ap.parse_args()
    builds = dict(b.split("=", 1) for b in a.build)
    doc = {"provenance": provenance(), "bundle": a.bundle, "steps": a.steps,
           "builds": {label: measure_build(Path(p), Path(a.bundle), a.steps) for label, p in builds.items()}}
    print(write_result(doc, a.out, markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
