"""ditskip-edge compile: photos + prompt + model -> subject bundle; prompt(s) + model alone -> model bundle (the phone
runs the subject stage: python -m ditskip_edge.runtime personalize)."""

from __future__ import annotations

import logging
import os

from ditskip_edge.backends import DEFAULT_TRAIN_BACKEND, TRAIN_BACKENDS
from ditskip_edge.cache import DEFAULT_CODEC, DEFAULT_DEVICE_CODEC  # noqa: F401 (the help text)
from ditskip_edge.lora import ALL_LINEAR, LoraSpec, every_linear_suffix
from ditskip_edge.models.loading import resolve_spec
from ditskip_edge.remat import REMAT_CHOICES, RematSpec
from ditskip_edge.runtime.bundle import LR_SCHEDULES, OptimizerSpec
from ditskip_edge.runtime.contract import PROGRAM_PRECISIONS, RUNTIMES
from ditskip_edge.runtime.errors import UserError
from ditskip_edge.runtime.schedule import ScheduleConfig
from export.executorch_stage import WEIGHTS, ExecutorchPrograms
from export.executorch_subject import SubjectPrograms
from export.generation_stage import GenerationPrograms
from export.ort_stage import OrtPrograms

from ..compile import CompileRequest, compile_bundle

def register(sub, add_json_flag) -> None:
    p = sub.add_parser("compile", help="compile a bundle from photos, a prompt and a model (without --images: a model "
                                       "bundle, personalized on the device)")
    p.add_argument("--model", default="flux-tiny", help="flux-tiny | sana-tiny | flux-testbed | a local diffusers "
                                                        "pipeline folder | a .safetensors file of flux-testbed "
                                                        "weights")
    p.add_argument("--images", default=None, help="folder of the subject's photos; leave it out for a model bundle "
                                                  "(no photos: the device runs the subject stage)")
    p.add_argument("--prompt", required=True, action="append", dest="prompts",
                   help="the subject prompt, e.g. 'a photo of sks dog' (a model bundle takes several: repeat it)")
    p.add_argument("--photo-captions", action="store_true",
                   help="train each photo with its own caption, read from the text file of the same name beside it "
                        "(dog1.jpg + dog1.txt, e.g. 'a photo of sks dog on a beach'); --prompt still picks the split")
    p.add_argument("--out", required=True, help="bundle folder to create")
    p.add_argument("--skip-front", type=int, default=None, help="blocks skipped at the front (n)")
    p.add_argument("--skip-back", type=int, default=None, help="blocks skipped at the back (m)")
    p.add_argument("--skip-ratio", type=float, default=None,
                   help="fraction of blocks to skip; the split is chosen by cross-attention masking")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps in the schedule (1 to 100000)")
    p.add_argument("--grad-accum", type=int, default=1, help="samples per optimizer step (1 to 256)")
    p.add_argument("--crop-min", type=int, default=None, help="s_min: train resolution in px (model default)")
    p.add_argument("--crop-max", type=int, default=None, help="s_max: data resolution in px (model default)")
    p.add_argument("--t-sampling", default="uniform", choices=["uniform", "logit_normal"])
    p.add_argument("--no-dynamic-patches", action="store_true", help="ablation: centre square resized to crop-min")
    p.add_argument("--rank", type=int, default=4, help="LoRA rank (1 to 1024)")
    p.add_argument("--alpha", type=float, default=None, help="LoRA alpha (default: rank)")
    p.add_argument("--lora-targets", default="",
                   help="comma-separated module suffixes in a block (default: the arch's attention projections), or "
                        "all-linear: every linear layer of a kept block")
    p.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate, in (0, 1]")
    p.add_argument("--lr-schedule", default="constant", choices=LR_SCHEDULES,
                   help="the learning rate over the optimizer steps: constant (default), or linear from --lr towards 0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runtime", action="append", default=[], dest="runtimes",
                   help=f"also export the device programs for these runtimes: {', '.join(RUNTIMES)} "
                        f"(comma-separated or repeated)")
    p.add_argument("--precision", default="int8",
                   help=f"frozen weights of the device programs, comma-separated for several programs: "
                        f"{', '.join(PROGRAM_PRECISIONS)} (default int8)")
    p.add_argument("--backend", default=None, choices=list(TRAIN_BACKENDS),
                   help=f"executorch: the training program's kernels: xnnpack (its matmuls and transposes lowered to "
                        f"XNNPACK) or portable (ExecuTorch's portable kernels alone, several times slower per step; "
                        f"default {DEFAULT_TRAIN_BACKEND}: benchmarks/results/device_footprint_backends.md)")
    p.add_argument("--xnnpack", action="store_true", help="the same as --backend xnnpack (older spelling)")
    p.add_argument("--generation", action="store_true",
                   help="also the generation part (text encoder, every block's forward, decoder, sampler) so the "
                        "device draws pictures with the trained LoRA: python -m ditskip_edge.runtime generate")
    p.add_argument("--generation-steps", type=int, default=20, help="generation: default sampler steps")
    p.add_argument("--guidance", type=float, default=3.0, help="generation: default classifier-free guidance scale")
    p.add_argument("--generation-px", type=int, default=None, help="generation: image side (model's train px)")
    p.add_argument("--text-precision", default="fp32", choices=["fp32", "int8", "int4"],
                   help="generation from a local pipeline folder: the text encoder programs' weights (CLIP, T5, "
                        "Gemma-2 linears; fp32 matches the host's encoders, int8 quarters T5-XXL's 18 GiB)")
    p.add_argument("--attention-chunk", type=int, default=None,
                   help="generation: attention in query chunks of this many tokens (the same result; one chunk's "
                        "scores in memory: FLUX.1-dev at 1024 px needs it to fit a phone, see `estimate`)")
    p.add_argument("--mlp-chunk", type=int, default=None,
                   help="generation: FLUX blocks' MLPs (feed-forwards, the single block's proj_mlp -> proj_out) in "
                        "token chunks of this many tokens (the same result up to rounding; one chunk's hidden "
                        "activations in memory: with --attention-chunk 128, --mlp-chunk 1024 fits FLUX.1-dev at "
                        "1024 px within training's footprint, see `estimate`)")
    p.add_argument("--decode-tile-px", type=int, default=None,
                   help="generation: decode in tiles of this many pixels a side, blended as diffusers' tiled "
                        "decode (the decoder's memory is one tile's; e.g. 256 for SANA's DC-AE on a phone)")
    p.add_argument("--encode-tile-px", type=int, default=None,
                   help="the subject stage's encoder on pixel tiles of this side, blended as diffusers' tiled "
                        "encode, on the host and in a model bundle's encode programs (the encoder's memory is one "
                        "tile's; e.g. 256 for SANA's DC-AE on a phone, see `estimate --subject-stage`)")
    p.add_argument("--remat", default=None,
                   help=f"executorch: block rematerialization in the training program: {REMAT_CHOICES} (kept "
                        f"blocks recomputed in backward; default blocks)")
    p.add_argument("--weights", default=None, choices=list(WEIGHTS),
                   help="executorch: frozen weights in a memory-mapped .ptd data file beside the program (mapped, "
                        "the default) or inside the .pte (resident)")
    p.add_argument("--transposed-codes", action="store_true",
                   help="executorch, xnnpack: the int8 codes the training step's backward reads transposed are also "
                        "stored transposed in the weights file (exact: no weight transposes in the step; the .ptd "
                        "holds those codes twice; speed and sizes in benchmarks/results/step_profile.md)")
    p.add_argument("--integer-matmuls", default=None, choices=["off", "qd8", "qd8_linears"],
                   help="executorch, xnnpack: the training step's forward matmuls with frozen int8 weights as "
                        "XNNPACK's dynamically quantized int8 kernels (qd8; qd8_linears: SANA's 1x1 convolutions "
                        "stay fp32). Not exact; faster (FLUX layout 1.9x per step) but XNNPACK packs those weights "
                        "into anonymous memory (3-4x the step's RssAnon), which `estimate` does not model; default "
                        "off (benchmarks/results/step_profile_qd8.md)")
    p.add_argument("--cache-codec", default=None,
                   help=f"residual-cache codec: fp32 | fp16 | int8-token | int8-channel | int8-gG | int8-tG | "
                        f"int4-gG | int4-tG | lowrank-rR, or 'DEFAULT,name=CODEC,...' (default {DEFAULT_CODEC} for a "
                        f"subject bundle, {DEFAULT_DEVICE_CODEC} for a model bundle: the native core's subject stage "
                        f"refuses lowrank; see cache-report)")
    p.add_argument("--subject-precision", default=None,
                   help=f"model bundle: frozen weights of the subject stage's forward programs (encode, embed, the "
                        f"blocks): {', '.join(PROGRAM_PRECISIONS)} (default: the training program's)")
    p.add_argument("--subject-backend", default="xnnpack", choices=["xnnpack", "portable"],
                   help="model bundle: ExecuTorch backend of the embed and block programs (default xnnpack; the "
                        "encoder's: --encode-backend)")
    p.add_argument("--encode-backend", default="xnnpack", choices=["xnnpack", "portable"],
                   help="model bundle: ExecuTorch backend of the encode program(s) (default xnnpack, fast; XNNPACK "
                        "packs the encoder's weights into anonymous memory even when mapped, portable reads the "
                        "mapped weights in place, about 20x slower: SANA's DC-AE encoder is 532 MiB of them, see `estimate "
                        "--subject-stage --encode-backend`)")
    p.add_argument("--encode-stages", action="store_true",
                   help="model bundle: the encoder as one program per encoder stage, run stage by stage over the "
                        "tiles, so one stage's weights are loaded at a time (XNNPACK packs them into anonymous "
                        "memory: SANA's DC-AE encoder is 532 MiB of them, its largest stage 216 MiB; see `estimate "
                        "--subject-stage --encode-stages`)")
    p.add_argument("--min-photos", type=int, default=1, help="model bundle: the fewest photos the device accepts")
    p.add_argument("--jobs", type=int, default=1,
                   help="2: export the generation programs in a second process while the residual cache is computed "
                        "(a second copy of the model in memory meanwhile); 1: one process (default)")
    p.add_argument("--program-cache", metavar="DIR|off",
                   help="where lowered programs are kept between compiles, keyed by their traced graph, weights, "
                        "options and toolchain (export/program_cache.py; default $DITSKIP_EDGE_PROGRAM_CACHE, else "
                        "~/.cache/ditskip-edge/programs, capped at 2 GiB); off: lower every program")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    add_json_flag(p)
    p.set_defaults(func=run)


def program_stages(runtimes: list[str], precision: str, backend: str | None, generation: GenerationPrograms | None = None,
                   remat: str | None = None, weights: str | None = None, xnnpack: bool = False,
                   transposed_codes: bool = False, integer_matmuls: str | None = None) -> list:
    """backend: the ExecuTorch training program's (None: DEFAULT_TRAIN_BACKEND); xnnpack: --xnnpack was given;
    transposed_codes: --transposed-codes; integer_matmuls: --integer-matmuls."""
    names = [r.strip() for arg in runtimes for r in arg.split(",") if r.strip()]
    bad = [r for r in names if r not in RUNTIMES]
    if bad:
        raise UserError(f"--runtime {','.join(bad)}: expected one of {', '.join(RUNTIMES)}")
    precisions = tuple(p.strip() for p in precision.split(",") if p.strip())
    if not names and generation is None and precision != "int8":
        raise UserError("--precision sets the device programs' frozen weights: add --runtime executorch and/or ort, "
                        "or --generation")
    if xnnpack and backend == "portable":
        raise UserError("--xnnpack and --backend portable: give one of them")
    if xnnpack and "executorch" not in names:
        raise UserError("--xnnpack lowers the ExecuTorch programs: add --runtime executorch")
    for flag, value in (("--backend", backend), ("--remat", remat), ("--weights", weights),
                        ("--transposed-codes", transposed_codes or None), ("--integer-matmuls", integer_matmuls)):
        if value is not None and "executorch" not in names:
            raise UserError(f"{flag} sets the ExecuTorch training program: add --runtime executorch")
    et = ExecutorchPrograms(precisions, "xnnpack" if xnnpack else (backend or DEFAULT_TRAIN_BACKEND),
                            remat=str(RematSpec.parse(remat or "blocks")), weights=weights or "mapped",
                            transposed_codes=transposed_codes, integer_matmuls=integer_matmuls or "off")
    if transposed_codes and et.backend != "xnnpack":
        raise UserError("--transposed-codes is for the XNNPACK training program: drop --backend portable")
    if et.integer_matmuls != "off" and et.backend != "xnnpack":
        raise UserError("--integer-matmuls is for the XNNPACK training program: drop --backend portable")
    if et.integer_matmuls != "off" and set(precisions) != {"int8"}:
        raise UserError("--integer-matmuls needs int8 frozen weights: --precision int8")
    stages = []
    for r in dict.fromkeys(names):
        stages.append(et if r == "executorch" else OrtPrograms(precisions))
    if generation is not None:
        stages.append(GenerationPrograms(precisions, generation.steps, generation.guidance, generation.px,
                                         backend=et.backend,              # the training program's, by default XNNPACK
                                         decode_tile_px=generation.decode_tile_px,
                                         text_precision=generation.text_precision,
                                         attention_chunk=generation.attention_chunk,
                                         mlp_chunk=generation.mlp_chunk))
    return stages


def run(args) -> dict:
    from export.lowering import prune_passes_from_env
    prune_passes_from_env()                             # a bad $DITSKIP_EDGE_XNNPACK_ALL_PASSES refused before any work
    if args.program_cache:                              # read by every exporter, and by compile --jobs 2's worker
        from export.program_cache import ENV_DIR
        os.environ[ENV_DIR] = args.program_cache
    model_bundle = args.images is None
    if len(args.prompts) > 1 and not model_bundle:
        raise UserError("a subject bundle takes one --prompt (several prompts make a model bundle: leave out --images)")
    if not model_bundle and (args.subject_precision or args.min_photos != 1
                             or args.subject_backend != "xnnpack" or args.encode_backend != "xnnpack"
                             or args.encode_stages):
        raise UserError("--subject-precision, --subject-backend, --encode-backend, --encode-stages and --min-photos "
                        "are a model bundle's: leave out --images")
    if model_bundle and not args.runtimes:
        args.runtimes = ["executorch"]                  # the subject stage's programs are ExecuTorch programs
    if model_bundle and args.cache_codec is not None and "lowrank" in args.cache_codec:
        logging.getLogger(__name__).warning(
            "--cache-codec %s: the native device runtime (ditskip-run personalize, the apps) refuses lowrank codecs; "
            "only python -m ditskip_edge.runtime personalize writes them", args.cache_codec)
    spec = resolve_spec(args.model)
    sched = ScheduleConfig(steps=args.steps, grad_accum=args.grad_accum,
                           s_min_px=args.crop_min or spec.train_px, s_max_px=args.crop_max or spec.data_px,
                           multiple_px=spec.pixel_multiple, seed=args.seed, t_sampling=args.t_sampling,
                           dynamic_patches=not args.no_dynamic_patches)
    targets = [s for s in args.lora_targets.split(",") if s]
    if targets == [ALL_LINEAR]:
        targets = every_linear_suffix(spec.arch, spec.transformer_config)
    lora = LoraSpec(rank=args.rank, alpha=args.alpha if args.alpha is not None else float(args.rank),
                    targets=targets)
    subject = None
    if model_bundle:
        precision = args.subject_precision or args.precision.split(",")[0].strip()
        if precision not in PROGRAM_PRECISIONS:
            raise UserError(f"--subject-precision {precision!r}: expected one of {', '.join(PROGRAM_PRECISIONS)}")
        subject = SubjectPrograms(precision=precision, backend=args.subject_backend, encode_backend=args.encode_backend,
                                  encode_stages=args.encode_stages, external_weights=(args.weights or "mapped") == "mapped")
    req = CompileRequest(model=args.model, images=args.images, prompt=args.prompts[0], out=args.out,
                         more_prompts=args.prompts[1:], subject_programs=subject, min_photos=args.min_photos,
                         n_front=args.skip_front, n_back=args.skip_back, skip_ratio=args.skip_ratio,
                         schedule=sched, lora=lora, optimizer=OptimizerSpec(lr=args.lr, lr_schedule=args.lr_schedule),
                         overwrite=args.force,
                         cache_codec=args.cache_codec, encode_tile_px=args.encode_tile_px, jobs=args.jobs,
                         photo_captions=args.photo_captions,
                         programs=program_stages(args.runtimes, args.precision, args.backend,
                                                 GenerationPrograms(steps=args.generation_steps, guidance=args.guidance,
                                                                    px=args.generation_px,
                                                                    decode_tile_px=args.decode_tile_px,
                                                                    text_precision=args.text_precision,
                                                                    attention_chunk=args.attention_chunk,
                                                                    mlp_chunk=args.mlp_chunk)
                                                 if args.generation else None,
                                                 remat=args.remat, weights=args.weights, xnnpack=args.xnnpack,
                                                 transposed_codes=args.transposed_codes,
                                                 integer_matmuls=args.integer_matmuls))
    return compile_bundle(req)
