"""The device stand-in: what a phone runs, with the runtime package alone (no compiler is imported).

    python -m ditskip_edge.runtime train BUNDLE --runtime executorch|ort [...] [--json]
    python -m ditskip_edge.runtime personalize MODEL_BUNDLE --photos DIR [--out SUBJECT_BUNDLE] [--prompt P]
                                   [--cache-free | --x0-only] [--no-train] [--runtime executorch|ort] [...] [--json]
    python -m ditskip_edge.runtime generate BUNDLE --prompt "..." --seed 0 [--steps N] [--lora RUN/lora] --out x.png

`personalize` runs the subject stage on a model bundle (runtime/subject.py: photos -> schedule -> x0 -> the skipped
blocks' forward, one block at a time -> residual cache, all on the device) and then trains the subject bundle it
wrote. `generate` draws a picture with the bundle's generation programs (runtime/generation.py), with the trained
LoRA merged if given. Prints one JSON document with --json (progress on stderr); a user mistake or a refused bundle is one line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .contract import PROGRAM_PRECISIONS, RUNTIMES
from .errors import UserError


def _train_args(t) -> None:
    t.add_argument("--runtime", default=None, choices=RUNTIMES)
    t.add_argument("--precision", default=None, choices=PROGRAM_PRECISIONS, help="which train_step program")
    t.add_argument("--run-dir", default=None, help="default: BUNDLE/runs/RUNTIME")
    t.add_argument("--steps", type=int, default=None, help="train only the first N steps of the schedule")
    t.add_argument("--checkpoint-every", type=int, default=50)
    t.add_argument("--no-resume", action="store_true")
    t.add_argument("--json", action="store_true")
    _threads_arg(t)


def _threads_arg(p) -> None:
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for ExecuTorch's kernels and XNNPACK (default: one per core)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ditskip_edge.runtime", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a bundle with a device runtime")
    t.add_argument("bundle")
    _train_args(t)
    t.add_argument("--device-preprocess", action="store_true", help="x0 from the photos (executorch)")
    t.add_argument("--keep-blocks", action="store_true",
                   help="x0-only / cache-free bundle: keep every block program loaded between steps (faster; every "
                        "block's planned arena stays in memory: default one block program at a time)")
    s = sub.add_parser("personalize", help="the subject stage on a model bundle, then training")
    s.add_argument("bundle", help="a model bundle (ditskip-edge compile without --images)")
    s.add_argument("--photos", required=True, help="folder of the subject's photos (they stay on this device)")
    s.add_argument("--out", default=None, help="the subject bundle to write (default: MODEL_BUNDLE-subject beside it)")
    s.add_argument("--prompt", default=None, help="one of the model bundle's prompts (default: its first)")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--cache-free", action="store_true",
                      help="store nothing: each training step encodes its crop and computes its residuals first")
    mode.add_argument("--x0-only", action="store_true",
                      help="store each sample's clean latents x0 alone (a few percent of a stored cache): each "
                           "training step computes its residuals from them first")
    s.add_argument("--no-train", action="store_true", help="stop after the subject stage")
    s.add_argument("--force", action="store_true", help="replace --out if it exists")
    s.add_argument("--keep-blocks", action="store_true",
                   help="keep every block program loaded (faster, more memory unless the weights are file-backed)")
    _train_args(s)
    g = sub.add_parser("generate", help="a picture from a prompt with the bundle's generation programs")
    g.add_argument("bundle")
    g.add_argument("--prompt", required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--steps", type=int, default=None, help="sampler steps (default: the bundle's)")
    g.add_argument("--guidance", type=float, default=None, help="classifier-free guidance (default: the bundle's)")
    g.add_argument("--lora", default=None, help="the trained LoRA file or its folder (e.g. BUNDLE/runs/executorch/lora)")
    g.add_argument("--precision", default=None, choices=PROGRAM_PRECISIONS, help="which generation programs")
    g.add_argument("--out", required=True, help="PNG to write (written whole or not at all)")
    g.add_argument("--json", action="store_true")
    _threads_arg(g)
    args = p.parse_args(argv)
    if args.threads is not None:
        from .bindings import set_executorch_threads
        try:
            set_executorch_threads(args.threads)
        except UserError as e:
            print(f"python -m ditskip_edge.runtime {args.command}: error: {e}", file=sys.stderr)
            return 2
    if args.command == "generate":
        return _generate(args)
    from .loop import RunConfig
    from .run import train_bundle
    try:
        if args.checkpoint_every < 1:
            raise UserError(f"--checkpoint-every {args.checkpoint_every}: expected >= 1")
        runtime = args.runtime
        if args.command == "train":
            if runtime is None:
                raise UserError("--runtime is required: executorch or ort")
            bundle, out = args.bundle, {}
        else:
            from .subject import SubjectConfig, personalize
            target = Path(args.out) if args.out else Path(str(Path(args.bundle)).rstrip("/") + "-subject")
            stage = personalize(args.bundle, args.photos, target, SubjectConfig(
                cache_mode="cache-free" if args.cache_free else "x0-only" if args.x0_only else "stored",
                prompt=args.prompt,
                resume=not args.no_resume, overwrite=args.force, keep_blocks=args.keep_blocks))
            bundle, out = target, {"subject_stage": stage}
            runtime = runtime or "executorch"
            if args.no_train:
                return _print(out, args.json, f"subject bundle {target} ({stage['num_samples']} samples, "
                                              f"{stage['cache_mode']})")
        run_dir = Path(args.run_dir) if args.run_dir else Path(bundle) / "runs" / runtime
        summary = train_bundle(bundle, runtime, RunConfig(run_dir=run_dir, steps=args.steps,
                               checkpoint_every=args.checkpoint_every, resume=not args.no_resume),
                               args.precision, getattr(args, "device_preprocess", False),
                               keep_blocks=True if args.keep_blocks else None)
    except UserError as e:
        print(f"python -m ditskip_edge.runtime {args.command}: error: {e}", file=sys.stderr)
        return 2
    if args.command == "train":
        return _print(summary, args.json, f"trained {summary['steps']} steps with {summary['runtime']}: final loss "
                                          f"{summary['final_loss']:.4f}; LoRA {summary['lora']}")
    out["train"] = summary
    return _print(out, args.json, f"subject bundle {bundle}; trained {summary['steps']} steps with "
                                  f"{summary['runtime']}: final loss {summary['final_loss']:.4f}; LoRA {summary['lora']}")


def _print(doc: dict, as_json: bool, line: str) -> int:
    if as_json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(line)
    return 0


def _generate(args) -> int:
    from .generation import GenerateRequest, generate
    try:
        _, summary = generate(args.bundle, GenerateRequest(
            prompt=args.prompt, seed=args.seed, steps=args.steps, guidance=args.guidance,
            lora=None if args.lora is None else Path(args.lora), precision=args.precision, out=Path(args.out)))
    except UserError as e:
        print(f"python -m ditskip_edge.runtime generate: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(f"wrote {summary['out']} ({summary['size_px'][1]}x{summary['size_px'][0]} px, {summary['steps']} steps, "
              f"{summary['seconds']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
