"""python -m device_tests BUNDLE --runtime executorch|ort [--precision P] [--run-dir D] [--margin 0.5]
                         [--slack-mib 64] [--budget-mib N | --uncapped] [--steps N] [--no-resume] [--json]
                         [--photos DIR [--subject-out OUT] [--cache-mode stored|x0-only|cache-free] [--no-train]]   (BUNDLE a model bundle)

Trains BUNDLE in a runtime-only child process under a footprint cap derived from the bundle's memory prediction
(device_tests/runner.py) and prints what a handset report would: status, the prediction and where it came from, the
budget, the child's baseline and peak dirty anonymous memory (RssAnon, what a phone counts) and file-backed memory
(RssFile) apart, the final loss and the LoRA. Files in the run folder: device_run.json (everything, with the
RssAnon / RssFile timeline), device_result.json (the child's own report), device_log.txt (its output).
Exit code: 0 ok, 3 out of memory or over the footprint budget (stopped cleanly; the checkpoint is whole), 1 other.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .runner import DEFAULT_MARGIN, DEFAULT_SLACK_BYTES, MIB, run_device


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m device_tests", description=__doc__.split("\n\n")[1])
    p.add_argument("bundle")
    p.add_argument("--runtime", required=True, choices=["executorch", "ort"])
    p.add_argument("--precision", default=None, choices=["fp32", "int8", "int4"])
    p.add_argument("--run-dir", default=None, help="default: BUNDLE/runs/device-RUNTIME")
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="budget = prediction x (1 + margin) + slack")
    p.add_argument("--slack-mib", type=float, default=DEFAULT_SLACK_BYTES / MIB)
    p.add_argument("--budget-mib", type=float, default=None, help="explicit footprint budget above the baseline, MiB")
    p.add_argument("--uncapped", action="store_true", help="no cap: measure only")
    p.add_argument("--no-reserve", action="store_true",
                   help="leave the runtime's untouched address-space reservation (runner.RUNTIME_RESERVED_BYTES) out "
                        "of the RLIMIT_DATA cap")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=1)
    p.add_argument("--no-resume", action="store_true")
    p.add_argument("--no-estimate", action="store_true", help="predict from the program's memory report only")
    p.add_argument("--photos", default=None, help="BUNDLE is a model bundle: run the subject stage on these photos "
                                                  "first (on the device), then train")
    p.add_argument("--subject-out", default=None, help="with --photos: the subject bundle (default BUNDLE-subject)")
    p.add_argument("--cache-mode", default="stored", choices=["stored", "x0-only", "cache-free"],
                   help="with --photos: what the subject stage stores (x0-only / cache-free: residuals each step)")
    p.add_argument("--no-train", action="store_true", help="with --photos: stop after the subject stage")
    p.add_argument("--json", action="store_true", help="print the full device_run.json document")
    a = p.parse_args(argv)
    run_dir = Path(a.run_dir) if a.run_dir else Path(a.bundle) / "runs" / f"device-{a.runtime}"
    run = run_device(a.bundle, a.runtime, run_dir, margin=a.margin, slack_bytes=int(a.slack_mib * MIB),
                     budget_bytes=None if a.budget_mib is None else int(a.budget_mib * MIB), uncapped=a.uncapped,
                     steps=a.steps, checkpoint_every=a.checkpoint_every, resume=not a.no_resume,
                     use_estimate=not a.no_estimate, reserve=not a.no_reserve, precision=a.precision,
                     photos=a.photos, subject_out=(a.subject_out or str(a.bundle).rstrip("/") + "-subject")
                     if a.photos else None, cache_mode=a.cache_mode, no_train=a.no_train)
    doc = run.to_json()
    if a.json:
        json.dump(doc, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        r = run.result
        short = {"status": run.status, "message": run.message or None, "runtime": run.runtime,
                 "prediction_bytes": (run.prediction or {}).get("bytes"),
                 "prediction_source": (run.prediction or {}).get("source"),
                 "prediction_alternatives": (run.prediction or {}).get("alternatives"),
                 "footprint_budget_bytes": run.budget_bytes, "rlimit_data_bytes": r.get("rlimit_data_bytes"),
                 "baseline_anon_bytes": run.baseline_anon_bytes, "peak_anon_bytes": run.peak_anon_bytes,
                 "footprint_above_baseline_bytes": run.footprint_above_baseline_bytes,
                 "peak_file_bytes": run.peak_file_bytes, "footprint_within_budget": run.footprint_within_budget,
                 "final_loss": run.summary.get("final_loss"), "lora": run.summary.get("lora"),
                 "subject_stage": r.get("subject_stage"),
                 "host_modules_loaded": r.get("host_modules_loaded"), "torch_loaded": r.get("torch_loaded"),
                 "run_dir": run.run_dir}
        print(json.dumps(short, indent=1))
    if run.status not in ("ok", "out_of_memory", "over_budget"):
        print(f"python -m device_tests: {run.status}: {run.message}", file=sys.stderr)
    return run.exit_code


if __name__ == "__main__":
    sys.exit(main())
