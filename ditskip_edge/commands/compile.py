"""ditskip-edge compile: photos + prompt + model -> bundle."""

from __future__ import annotations

from ..cli import add_json_flag
from ..compile import CompileRequest, OptimizerSpec, compile_bundle
from ..lora import LoraSpec
from ..models.loading import resolve_spec
from ..quantize import QuantSpec
from ..residual_cache import DEFAULT_CODEC
from ..schedule import ScheduleConfig


def register(sub) -> None:
    p = sub.add_parser("compile", help="compile a bundle from photos, a prompt and a model")
    p.add_argument("--model", default="flux-tiny", help="flux-tiny | sana-tiny | a local diffusers pipeline folder")
    p.add_argument("--images", required=True, help="folder of the subject's photos")
    p.add_argument("--prompt", required=True, help="the subject prompt, e.g. 'a photo of sks dog'")
    p.add_argument("--out", required=True, help="bundle folder to create")
    p.add_argument("--skip-front", type=int, default=None, help="blocks skipped at the front (n)")
    p.add_argument("--skip-back", type=int, default=None, help="blocks skipped at the back (m)")
    p.add_argument("--skip-ratio", type=float, default=None,
                   help="fraction of blocks to skip; the split is chosen by cross-attention masking")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps in the schedule")
    p.add_argument("--grad-accum", type=int, default=1, help="samples per optimizer step")
    p.add_argument("--crop-min", type=int, default=None, help="s_min: train resolution in px (model default)")
    p.add_argument("--crop-max", type=int, default=None, help="s_max: data resolution in px (model default)")
    p.add_argument("--t-sampling", default="uniform", choices=["uniform", "logit_normal"])
    p.add_argument("--no-dynamic-patches", action="store_true", help="ablation: centre square resized to crop-min")
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--alpha", type=float, default=None, help="LoRA alpha (default: rank)")
    p.add_argument("--lora-targets", default="", help="comma-separated module suffixes in a block (arch default)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runtime", action="append", default=[], dest="runtimes",
                   help="also export the device programs for this runtime (repeatable): executorch | ort")
    p.add_argument("--cache-codec", default=DEFAULT_CODEC,
                   help=f"residual-cache codec: fp32 | fp16 | int8-token | int8-channel | int8-gG | int8-tG | "
                        f"int4-gG | int4-tG | "
                        f"lowrank-rR, or 'DEFAULT,name=CODEC,...' (default {DEFAULT_CODEC}; see cache-report)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--quant-bits", default="8", help="frozen-weight bits of the device programs: 16 (fp32), 8, 4; "
                                                     "executorch takes a comma-separated list, ort the first value")
    p.add_argument("--xnnpack", action="store_true", help="executorch: lower to XNNPACK where it works")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args) -> dict:
    spec = resolve_spec(args.model)
    sched = ScheduleConfig(steps=args.steps, grad_accum=args.grad_accum,
                           s_min_px=args.crop_min or spec.train_px, s_max_px=args.crop_max or spec.data_px,
                           multiple_px=spec.pixel_multiple, seed=args.seed, t_sampling=args.t_sampling,
                           dynamic_patches=not args.no_dynamic_patches)
    lora = LoraSpec(rank=args.rank, alpha=args.alpha if args.alpha is not None else float(args.rank),
                    targets=[s for s in args.lora_targets.split(",") if s])
    req = CompileRequest(model=args.model, images=args.images, prompt=args.prompt, out=args.out,
                         n_front=args.skip_front, n_back=args.skip_back, skip_ratio=args.skip_ratio,
                         schedule=sched, lora=lora, optimizer=OptimizerSpec(lr=args.lr), overwrite=args.force,
                         cache_codec=args.cache_codec,
                         runtimes=args.runtimes, quant=QuantSpec(bits=int(args.quant_bits.split(",")[0])),
                         runtime_options={"executorch": {
                             "quant_bits": [int(b) for b in args.quant_bits.split(",") if b],
                             "backend": "xnnpack" if args.xnnpack else "portable"}})
    return compile_bundle(req)
