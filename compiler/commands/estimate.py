"""ditskip-edge estimate (alias: plan): the memory estimate of a BlockSkip training step on a device, and its
storage, from the architecture alone (no weights). "Plan" elsewhere means the skip plan; the subcommand keeps its
old name as an alias."""

from __future__ import annotations

from ditskip_edge.backends import DEFAULT_TRAIN_BACKEND, TRAIN_BACKENDS
from ditskip_edge.memory_estimate.request import DEFAULT_RUNTIME_OVERHEAD_MIB, EstimateRequest, estimate_memory
from ditskip_edge.runtime.contract import PRECISIONS, WEIGHT_PLACEMENTS


def register(sub, add_json_flag) -> None:
    p = sub.add_parser("estimate", aliases=["plan"],
                       help="estimate the device memory and storage of a training step (no weights needed)")
    p.add_argument("--model", required=True, help="flux-dev | sana-1600m | sana-600m | a tiny name | a local folder")
    p.add_argument("--skip-ratio", type=float, default=None,
                   help="fraction of blocks skipped; the split is the paper's (FLUX at 30/40/50%%) or the default")
    p.add_argument("--skip-front", type=int, default=None, help="blocks skipped at the front (n), with --skip-back")
    p.add_argument("--skip-back", type=int, default=None, help="blocks skipped at the back (m)")
    p.add_argument("--precision", default="int8", choices=PRECISIONS,
                   help="frozen weights: fp32, bf16 (weights and compute), int8 or int4 (fp32 compute)")
    p.add_argument("--resolution", type=int, default=None, help="train resolution in px (model default: s_min)")
    p.add_argument("--text-tokens", type=int, default=None, help="text tokens L (model default)")
    p.add_argument("--rank", type=int, default=16, help="LoRA rank")
    p.add_argument("--attention", default="math", choices=["math", "flash"],
                   help="math: the device program's attention (default); flash: torch's CPU kernel (eager)")
    p.add_argument("--runtime-overhead-mib", type=float, default=DEFAULT_RUNTIME_OVERHEAD_MIB,
                   help="process / runtime library overhead added to the peak (default: assumed, a runtime library "
                        "+ an app process); for the native core alone pass its measured fixed cost: `ditskip-run "
                        "footprint --json` (benchmarks/results/device_footprint_*.json native_fixed_cost)")
    p.add_argument("--steps", type=int, default=500, help="optimizer steps (storage of the residual cache, and the time estimate; default 500 x --grad-accum 4, the paper's schedule)")
    p.add_argument("--grad-accum", type=int, default=4, help="samples per step (storage of the residual cache)")
    p.add_argument("--remat", default="blocks",
                   help="block rematerialization in the step: none | blocks | every:K (kept blocks recomputed in "
                        "backward, K a segment; default blocks, what compile exports)")
    p.add_argument("--weights", default="mapped", choices=list(WEIGHT_PLACEMENTS),
                   help="frozen weights in anonymous memory, or memory-mapped from the bundle's data file (clean, "
                        "file-backed: not in the footprint; default mapped, what compile exports)")
    p.add_argument("--backend", default=DEFAULT_TRAIN_BACKEND, choices=list(TRAIN_BACKENDS),
                   help=f"the ExecuTorch training program's backend (default {DEFAULT_TRAIN_BACKEND}, what compile "
                        f"exports): where its transposed weight copies are live")
    p.add_argument("--phone-gflops", type=float, default=None,
                   help="the time estimate's phone: its fp32 GEMM GFLOP/s on one core (default: a published figure "
                        "for a named phone class, ditskip_edge/memory_estimate/timing.py; the JSON's time.phone "
                        "says which)")
    p.add_argument("--generation-steps", type=int, default=20,
                   help="the picture's sampler steps in the time estimate (compile --generation-steps' default)")
    p.add_argument("--subject-stage", action="store_true",
                   help="also predict the on-device subject stage (footprint, time in FLOPs per sample) and the "
                        "cache-free mode (storage saved, footprint, extra FLOPs per step)")
    p.add_argument("--cache-codec", default="int8-channel,front.txt=lowrank-r16",
                   help="the stored residual cache's codec (the cache-free comparison's storage)")
    p.add_argument("--forward-precision", default=None, choices=PRECISIONS,
                   help="the subject stage's forward programs' frozen weights (default: --precision)")
    p.add_argument("--encode-tile-px", type=int, default=None,
                   help="the subject stage's encoder on tiles of this many pixels a side (compile's --encode-tile-px; "
                        "default: the whole crop at once)")
    p.add_argument("--encode-backend", default="xnnpack", choices=["xnnpack", "portable"],
                   help="the subject stage's encoder programs (compile's --encode-backend): XNNPACK packs the "
                        "encoder's weights into anonymous memory; portable reads mapped weights in place (about 20x slower)")
    p.add_argument("--encode-stages", action="store_true",
                   help="the subject stage's encoder as one program per encoder stage (compile's --encode-stages): "
                        "one stage's weights at a time")
    p.add_argument("--generation-px", type=int, nargs="*", default=None,
                   help="also estimate on-device generation (full model one block at a time, each guidance branch at batch 1, "
                        "weights mapped) at these image sides (no value: the train resolution and the model's data "
                        "resolution)")
    p.add_argument("--decode-tile-px", type=int, default=None,
                   help="generation: the decoder runs on tiles of this many pixels a side (compile's "
                        "--decode-tile-px; default: the whole picture at once)")
    p.add_argument("--attention-chunk", type=int, default=None,
                   help="generation: attention in query chunks of this many tokens (compile's --attention-chunk)")
    p.add_argument("--mlp-chunk", type=int, default=None,
                   help="generation: FLUX blocks' MLPs in token chunks of this many tokens (compile's --mlp-chunk)")
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args) -> dict:
    return estimate_memory(EstimateRequest(model=args.model, skip_ratio=args.skip_ratio, skip_front=args.skip_front,
                                 skip_back=args.skip_back, precision=args.precision, resolution_px=args.resolution,
                                 text_tokens=args.text_tokens, rank=args.rank, attention=args.attention,
                                 runtime_overhead_mib=args.runtime_overhead_mib, steps=args.steps,
                                 grad_accum=args.grad_accum, remat=args.remat, weights=args.weights, backend=args.backend,
                                 subject_stage=args.subject_stage, cache_codec=args.cache_codec,
                                 forward_precision=args.forward_precision, encode_tile_px=args.encode_tile_px,
                                 encode_backend=args.encode_backend, encode_stages=args.encode_stages,
                                 generation_px=_generation_px(args),
                                 decode_tile_px=args.decode_tile_px, attention_chunk=args.attention_chunk,
                                 mlp_chunk=args.mlp_chunk,
                                 generation_steps=args.generation_steps, phone_gflops=args.phone_gflops))


def _generation_px(args) -> tuple[int, ...]:
    if args.generation_px is None:
        return ()
    if args.generation_px:
        return tuple(args.generation_px)
    from ditskip_edge.models.loading import resolve_spec
    spec = resolve_spec(args.model)
    return tuple(dict.fromkeys([args.resolution or spec.train_px, spec.data_px]))
