"""Summarise a handset run pulled by android_run.sh / ios_pull_readout.sh against the bundle's prediction.

    python3 device_tests/handset/summarize.py OUT_DIR BUNDLE_DIR [--estimate]

Reads the native core's summary (OUT_DIR/summary.json: `ditskip-run train --json`'s stdout on Android; else
OUT_DIR/run/summary.json, what the core wrote in the app's run folder on iOS) and, from the iOS app,
OUT_DIR/run/device_run.json (per step phys_footprint and os_proc_available_memory). Prints one JSON document: exit
code, losses, LoRA, peak RssAnon / RssFile of the process (Android: the core's /proc readings after each step) or peak
phys_footprint (iOS), and the bundle's prediction (the exported memory report; with --estimate, `ditskip-edge
estimate`'s too). Writes the same to OUT_DIR/handset_summary.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def summarize(out: Path, bundle: Path, estimate: bool = False) -> dict:
    from device_tests.predict import predict_memory
    run = _json(out / "summary.json") or _json(out / "run" / "summary.json") or {}
    code = out / "exit_code.txt"
    doc = {"exit_code": int(code.read_text()) if code.is_file() else None, "losses": run.get("losses"),
           "lora": run.get("lora"), "steps": run.get("steps"), "seconds_per_step": run.get("seconds_per_step")}
    if (out / "stderr.txt").is_file():
        lines = (out / "stderr.txt").read_text().strip().splitlines()
        doc["last_stderr_line"] = lines[-1] if lines else None
    fp = run.get("footprint")
    if fp:                                                       # Android: the process's own /proc readings
        rows = [dict(zip(fp["per_step_fields"], r)) for r in fp["per_step"]]
        doc["peak_anon_bytes"] = max((r["anon_bytes"] for r in rows), default=None)
        doc["peak_file_bytes"] = max((r["file_bytes"] for r in rows), default=None)
        doc["peak_anon_above_start_bytes"] = fp.get("peak_anon_above_start_bytes")
    app = _json(out / "run" / "device_run.json")
    if app:                                                      # iOS: the app's readout
        rows = [dict(zip(app["timeline_fields"], r)) for r in app["timeline"]]
        doc["peak_footprint_bytes"] = max((r["footprint_bytes"] for r in rows), default=None)
        doc["min_available_bytes"] = min((r["available_bytes"] for r in rows), default=None)
    p = predict_memory(bundle, "executorch", use_estimate=estimate)
    doc["prediction"] = {"bytes": p.bytes, "source": p.source, "parts": p.parts, "alternatives": p.alternatives,
                         "counts": "the training step only: the runtime's fixed cost comes on top"}
    (out / "handset_summary.json").write_text(json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    print(json.dumps(summarize(Path(args[0]), Path(args[1]), estimate="--estimate" in sys.argv), indent=1))
