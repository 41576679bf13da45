"""Summarise a handset run pulled by android_run.sh / ios_pull_readout.sh against the bundle's prediction.

    python3 device_tests/handset/summarize.py OUT_DIR BUNDLE_DIR      (plain python3 + the repo: no torch needed
                                                                        unless the memory estimate is asked, see --estimate)

Prints one JSON document: the app's status and losses, its peak memory (Android: VmHWM and dumpsys TOTAL PSS;
iOS: peak phys_footprint, lowest os_proc_available_memory), and the bundle's prediction (the exported memory
report; with --estimate, `ditskip-edge estimate`'s figure too). It writes the same to OUT_DIR/summary.json.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def summarize(out: Path, bundle: Path, estimate: bool = False) -> dict:
    from device_tests.predict import predict_memory
    run = json.loads((out / "run" / "device_run.json").read_text())
    doc = {"status": run.get("status"), "message": run.get("message"), "runtime": run.get("runtime"),
           "losses": run.get("losses"), "lora": run.get("lora")}
    fields = run.get("timeline_fields", [])
    rows = [dict(zip(fields, r)) for r in run.get("timeline", [])]
    if "hwm_bytes" in fields:                      # Android app readout
        doc["peak_vm_hwm_bytes"] = max([r["hwm_bytes"] for r in rows] + [run.get("peak_rss_bytes", 0)])
        doc["peak_native_heap_bytes"] = max((r["native_heap_bytes"] for r in rows), default=None)
    if "footprint_bytes" in fields:                # iOS app readout
        doc["peak_footprint_bytes"] = max((r["footprint_bytes"] for r in rows), default=None)
        doc["min_available_bytes"] = min((r["available_bytes"] for r in rows), default=None)
    pss = out / "dumpsys_meminfo.csv"
    if pss.is_file():
        vals = [int(r["total_pss_kib"]) for r in csv.DictReader(pss.open()) if r.get("total_pss_kib")]
        doc["peak_total_pss_bytes"] = max(vals) * 1024 if vals else None
    runtime = "executorch"
    p = predict_memory(bundle, runtime, use_estimate=estimate)
    doc["prediction"] = {"bytes": p.bytes, "source": p.source, "parts": p.parts, "alternatives": p.alternatives,
                         "counts": "the training step only: the app process and runtime library come on top"}
    (out / "summary.json").write_text(json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    print(json.dumps(summarize(Path(args[0]), Path(args[1]), estimate="--estimate" in sys.argv), indent=1))
