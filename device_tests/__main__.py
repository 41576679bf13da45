"""python -m device_tests BUNDLE --runtime executorch|ort [--run-dir D] [--margin 0.5] [--slack-mib 64]
                         [--budget-mib N | --uncapped] [--steps N] [--no-resume] [--json]

Trains BUNDLE in a runtime-only child process under an RLIMIT_AS cap derived from the bundle's memory prediction
(device_tests/runner.py) and prints what a handset report would: status, the prediction and where it came from, the
budget, the child's baseline and peak resident memory, the final loss and the LoRA. Files in the run folder:
device_run.json (everything, with the RSS/VmSize timeline), device_result.json (the child's own report),
device_log.txt (its stdout/stderr). Exit code: 0 ok, 3 out of memory under the cap, 4 trained but the resident peak went over the budget, 1 other.
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
    p.add_argument("--run-dir", default=None, help="default: BUNDLE/runs/device-RUNTIME")
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="budget = prediction x (1 + margin) + slack")
    p.add_argument("--slack-mib", type=float, default=DEFAULT_SLACK_BYTES / MIB)
    p.add_argument("--budget-mib", type=float, default=None, help="explicit budget above the baseline, MiB")
    p.add_argument("--uncapped", action="store_true", help="no cap: measure only")
    p.add_argument("--no-reserve", action="store_true",
                   help="leave out the runtime's untouched address-space reservation (runner.RUNTIME_RESERVED_BYTES)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=1)
    p.add_argument("--no-resume", action="store_true")
    p.add_argument("--no-estimate", action="store_true", help="predict from the exported memory report only")
    p.add_argument("--json", action="store_true", help="print the full device_run.json document")
    a = p.parse_args(argv)
    run_dir = Path(a.run_dir) if a.run_dir else Path(a.bundle) / "runs" / f"device-{a.runtime}"
    run = run_device(a.bundle, a.runtime, run_dir, margin=a.margin, slack_bytes=int(a.slack_mib * MIB),
                     budget_bytes=None if a.budget_mib is None else int(a.budget_mib * MIB), uncapped=a.uncapped,
                     steps=a.steps, checkpoint_every=a.checkpoint_every, resume=not a.no_resume,
                     use_estimate=not a.no_estimate, reserve=not a.no_reserve)
    doc = run.to_json()
    if a.json:
        json.dump(doc, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        r = run.result
        short = {"status": run.status, "message": run.message or None, "runtime": run.runtime,
                 "prediction_bytes": (run.prediction or {}).get("bytes"),
                 "prediction_source": (run.prediction or {}).get("source"),
                 "prediction_alternatives": (run.prediction or {}).get("alternatives"), "budget_bytes": run.budget_bytes,
                 "rlimit_as_bytes": r.get("rlimit_as_bytes"), "baseline_rss_bytes": run.baseline_rss_bytes,
                 "peak_rss_bytes": run.peak_rss_bytes, "peak_rss_above_baseline_bytes": doc["peak_rss_above_baseline_bytes"],
                 "rss_within_budget": run.rss_within_budget, "final_loss": run.summary.get("final_loss"),
                 "lora": run.summary.get("lora"), "host_modules_loaded": r.get("host_modules_loaded"),
                 "torch_loaded": r.get("torch_loaded"), "run_dir": run.run_dir}
        print(json.dumps(short, indent=1))
    if run.status == "ok":
        return 0 if run.rss_within_budget in (True, None) else 4     # 4: trained, but resident peak over budget
    return 3 if run.status == "out_of_memory" else 1


if __name__ == "__main__":
    sys.exit(main())
