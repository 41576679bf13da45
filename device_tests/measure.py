"""Measure bundles the way the device tests run them and write a table (a benchmark script: tests never time).

    python -m device_tests.measure OUT.md BUNDLE:RUNTIME [BUNDLE:RUNTIME ...]

For each bundle and runtime: the prediction (memory estimate, and the program's memory report), one uncapped run (what
the step really takes: dirty anonymous memory (RssAnon, what a phone counts) above the child's baseline, and the
file-backed memory (RssFile) apart), one run under the derived cap, and one under 10% of the prediction (must stop
cleanly). Every figure is bytes unless the column says MiB.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from .predict import predict_memory
from .runner import MIB, run_device


def measure(bundle: Path, runtime: str) -> dict:
    manifest = json.loads((bundle / "manifest.json").read_text())
    pred = predict_memory(bundle, runtime)
    tmp = Path(tempfile.mkdtemp(prefix="measure-"))
    try:
        free = run_device(bundle, runtime, tmp / "free", uncapped=True, resume=False)
        capped = run_device(bundle, runtime, tmp / "capped", resume=False)
        starved = run_device(bundle, runtime, tmp / "starved", budget_bytes=int(pred.bytes * 0.1), reserve=False,
                             resume=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"bundle": bundle.name, "model": manifest["model"]["name"], "runtime": runtime,
            "plan": f"{manifest['plan']['n_front']}/{manifest['plan']['n_back']} of {manifest['plan']['num_blocks']}",
            "prediction_bytes": pred.bytes, "prediction_source": pred.source,
            "memory_report_bytes": pred.alternatives.get("memory_report", pred.bytes if pred.source == "memory_report" else None),
            "baseline_anon_bytes": free.baseline_anon_bytes, "footprint_growth_bytes": free.footprint_above_baseline_bytes,
            "peak_file_bytes": free.peak_file_bytes,
            "data_growth_bytes": free.result["end"]["data_bytes"] - free.baseline["data_bytes"],
            "budget_bytes": capped.budget_bytes, "capped_status": capped.status,
            "capped_within_budget": capped.footprint_within_budget,
            "starved_status": starved.status, "starved_message": starved.message[:160],
            "final_loss": free.summary.get("final_loss"), "seconds": free.result.get("seconds"),
            "torch_loaded": free.result.get("torch_loaded"), "host_modules_loaded": free.result.get("host_modules_loaded")}


def table(rows: list[dict]) -> str:
    head = ("| bundle | runtime | plan | prediction (source) MiB | memory report MiB | baseline RssAnon MiB | "
            "RssAnon growth MiB | peak RssFile MiB | VmData growth MiB | budget MiB | capped | 10% cap | torch in child "
            "| s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        f = lambda b: "" if b is None else f"{b / MIB:.2f}"  # noqa: E731
        lines.append(f"| {r['model']} | {r['runtime']} | {r['plan']} | {f(r['prediction_bytes'])} "
                     f"({r['prediction_source']}) | {f(r['memory_report_bytes'])} | {f(r['baseline_anon_bytes'])} | "
                     f"{f(r['footprint_growth_bytes'])} | {f(r['peak_file_bytes'])} | {f(r['data_growth_bytes'])} | "
                     f"{f(r['budget_bytes'])} | {r['capped_status']} (in budget: {r['capped_within_budget']}) | "
                     f"{r['starved_status']} | "
                     f"{r['torch_loaded']} | {r['seconds']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    rows = []
    for spec in argv[1:]:
        bundle, _, runtime = spec.rpartition(":")
        rows.append(measure(Path(bundle), runtime))
    out.write_text(table(rows) + "\n```json\n" + json.dumps(rows, indent=1) + "\n```\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
