"""ditskip-edge train BUNDLE: run the bundle's schedule and write a diffusers-loadable LoRA."""

from __future__ import annotations

from pathlib import Path

from ..cli import add_json_flag
from ..errors import UserError

RUNTIMES = ["eager", "executorch", "ort"]


def register(sub) -> None:
    p = sub.add_parser("train", help="train a bundle")
    p.add_argument("bundle")
    p.add_argument("--runtime", default="eager", help="eager (reference) | executorch | ort")
    p.add_argument("--run-dir", default=None, help="where checkpoint, LoRA and summary go (BUNDLE/runs/RUNTIME)")
    p.add_argument("--steps", type=int, default=None, help="train only the first N steps of the schedule")
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--device-preprocess", action="store_true",
                   help="executorch: compute x0 with the bundle's preprocessing program instead of reading the cache")
    p.add_argument("--quant-bits", type=int, default=None, help="executorch: which train_step program (16/8/4)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args) -> dict:
    if not Path(args.bundle).is_dir():
        raise UserError(f"bundle {args.bundle} is not a folder")
    run_dir = Path(args.run_dir) if args.run_dir else Path(args.bundle) / "runs" / args.runtime
    if args.runtime == "eager":
        from ..trainer import TrainConfig, train_eager
        return train_eager(args.bundle, TrainConfig(run_dir=run_dir, steps=args.steps,
                                                     checkpoint_every=args.checkpoint_every,
                                                     resume=not args.no_resume))
    if args.runtime == "ort":
        from export.ort_memory import measure_step_memory
        from export.ort_trainer import OrtTrainConfig, train_ort
        summary = train_ort(args.bundle, OrtTrainConfig(run_dir=run_dir, steps=args.steps,
                                                        checkpoint_every=args.checkpoint_every,
                                                        resume=not args.no_resume))
        summary["memory"] = measure_step_memory(args.bundle)
        return summary
    if args.runtime == "executorch":
        from export.executorch_trainer import RuntimeTrainConfig, train_executorch
        return train_executorch(args.bundle, RuntimeTrainConfig(
            run_dir=run_dir, steps=args.steps, checkpoint_every=args.checkpoint_every, resume=not args.no_resume,
            device_preprocess=getattr(args, "device_preprocess", False), quant_bits=getattr(args, "quant_bits", None)))
    raise UserError(f"runtime {args.runtime!r} is not available; expected one of {RUNTIMES}")
