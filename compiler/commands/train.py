"""ditskip-edge train BUNDLE: run the bundle's schedule and write a diffusers-loadable LoRA."""

from __future__ import annotations

from pathlib import Path

from ditskip_edge.runtime.contract import PROGRAM_PRECISIONS, RUNTIMES
from ditskip_edge.runtime.errors import UserError

TRAIN_RUNTIMES = ("eager",) + RUNTIMES


def register(sub, add_json_flag) -> None:
    p = sub.add_parser("train", help="train a bundle")
    p.add_argument("bundle")
    p.add_argument("--runtime", default="eager", choices=TRAIN_RUNTIMES,
                   help="eager (the host reference) | executorch | ort (the bundle's device programs)")
    p.add_argument("--precision", default=None, choices=PROGRAM_PRECISIONS,
                   help="executorch / ort: which train_step program (default: the bundle's first)")
    p.add_argument("--run-dir", default=None, help="where checkpoint, LoRA and summary go (BUNDLE/runs/RUNTIME)")
    p.add_argument("--steps", type=int, default=None, help="train only the first N steps of the schedule")
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--device-preprocess", action="store_true",
                   help="executorch: compute x0 with the bundle's preprocessing programs instead of reading the cache")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args) -> dict:
    from ditskip_edge.runtime.bundle import Bundle
    from ditskip_edge.runtime.loop import RunConfig, train
    if args.checkpoint_every < 1:
        raise UserError(f"--checkpoint-every {args.checkpoint_every}: expected >= 1")
    run_dir = Path(args.run_dir) if args.run_dir else Path(args.bundle) / "runs" / args.runtime
    cfg = RunConfig(run_dir=run_dir, steps=args.steps, checkpoint_every=args.checkpoint_every,
                    resume=not args.no_resume)
    if args.runtime != "eager":
        from ditskip_edge.runtime.run import train_bundle
        return train_bundle(args.bundle, args.runtime, cfg, args.precision, args.device_preprocess)
    if args.precision or args.device_preprocess:
        raise UserError("--precision and --device-preprocess choose a device program: use them with --runtime "
                        "executorch or ort")
    from ditskip_edge.eager import EagerStep
    bundle = Bundle.open(args.bundle)
    return train(bundle, EagerStep(bundle), cfg)
