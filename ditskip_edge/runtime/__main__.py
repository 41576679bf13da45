"""The device stand-in: `python -m ditskip_edge.runtime train BUNDLE --runtime executorch|ort [...] [--json]`.

Runs what a phone runs with the runtime package alone (no compiler is imported). Prints one JSON document with
--json (progress on stderr); a user mistake or a refused bundle is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .contract import PROGRAM_PRECISIONS, RUNTIMES
from .errors import UserError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ditskip_edge.runtime", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a bundle with a device runtime")
    t.add_argument("bundle")
    t.add_argument("--runtime", required=True, choices=RUNTIMES)
    t.add_argument("--precision", default=None, choices=PROGRAM_PRECISIONS, help="which train_step program")
    t.add_argument("--run-dir", default=None, help="default: BUNDLE/runs/RUNTIME")
    t.add_argument("--steps", type=int, default=None, help="train only the first N steps of the schedule")
    t.add_argument("--checkpoint-every", type=int, default=50)
    t.add_argument("--no-resume", action="store_true")
    t.add_argument("--device-preprocess", action="store_true", help="x0 from the photos (executorch)")
    t.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from .loop import RunConfig
    from .run import train_bundle
    try:
        if args.checkpoint_every < 1:
            raise UserError(f"--checkpoint-every {args.checkpoint_every}: expected >= 1")
        run_dir = Path(args.run_dir) if args.run_dir else Path(args.bundle) / "runs" / args.runtime
        summary = train_bundle(args.bundle, args.runtime, RunConfig(run_dir=run_dir, steps=args.steps,
                               checkpoint_every=args.checkpoint_every, resume=not args.no_resume),
                               args.precision, args.device_preprocess)
    except UserError as e:
        print(f"python -m ditskip_edge.runtime {args.command}: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(f"trained {summary['steps']} steps with {summary['runtime']}: final loss {summary['final_loss']:.4f}; "
              f"LoRA {summary['lora']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
