"""An estimate request (model, skip ratio or split, precision, resolution, text tokens, rank) -> one JSON document."""

from __future__ import annotations

from dataclasses import dataclass

from ..backends import DEFAULT_TRAIN_BACKEND, TRAIN_BACKENDS
from ..models.loading import resolve_spec
from ..models.specs import FLUX_ARCH
from ..runtime.cache_format import CacheCodec
from ..runtime.contract import PRECISIONS
from ..runtime.errors import UserError
from .memory import MIB, WEIGHTS, MemoryEstimate, StepTrace, storage_estimate, trace_step, weight_reads
from .program import StepConfig, remat_every
from .split import split_for_ratio

# assumed: a runtime library + app process, not traced (see README). The native core's own fixed cost is measured
# (`ditskip-run footprint --json`: its process with the core and ExecuTorch's libraries loaded, nothing else; the
# figure is in benchmarks/results/device_footprint_*.json native_fixed_cost); pass it as --runtime-overhead-mib to
# estimate the native process alone, without an app around it.
DEFAULT_RUNTIME_OVERHEAD_MIB = 100


@dataclass(frozen=True)
class EstimateRequest:
    model: str
    skip_ratio: float | None = None
    skip_front: int | None = None
    skip_back: int | None = None
    precision: str = "int8"
    resolution_px: int | None = None     # None: the model's train resolution (s_min)
    text_tokens: int | None = None       # None: the model's text length
    rank: int = 16
    attention: str = "math"
    runtime_overhead_mib: float = DEFAULT_RUNTIME_OVERHEAD_MIB
    steps: int = 500
    grad_accum: int = 4
    remat: str = "blocks"                # block rematerialization: none | blocks | every:K (compile's default)
    weights: str = "mapped"              # frozen weights resident (anonymous) or mapped from the data file
    subject_stage: bool = False          # also the on-device subject stage and the cache-free mode (subject.py)
    cache_codec: str = "int8-channel,front.txt=lowrank-r16"    # the stored cache's codec (cache-free comparison)
    forward_precision: str | None = None  # the subject stage's forward programs (default: precision)
    encode_tile_px: int | None = None    # the subject stage's encoder on tiles of this side (compile --encode-tile-px)
    encode_backend: str = "xnnpack"      # the encoder's backend: XNNPACK packs its weights into anonymous memory
    encode_stages: bool = False          # the encoder as one program per stage (compile --encode-stages)
    subject_photos: int = 4              # the subject stage holds every decoded photo: this many at s_max x s_max
    photo_sizes: tuple = ()              # ... or these (height, width), normalised (subject.photo_sizes_of)
    generation_px: tuple[int, ...] = ()  # also estimate generation (memory_estimate/generation.py) at these sides
    decode_tile_px: int | None = None    # generation's decoder on tiles of this side (compile --decode-tile-px)
    attention_chunk: int | None = None   # generation's attention in query chunks (compile --attention-chunk)
    mlp_chunk: int | None = None         # generation's FLUX MLPs in token chunks (compile --mlp-chunk)
    backend: str = DEFAULT_TRAIN_BACKEND  # the ExecuTorch program's backend (compile's default): its weight copies
    generation_steps: int = 20           # the picture's sampler steps (compile --generation-steps' default)
    phone_gflops: float | None = None    # the phone's fp32 GEMM GFLOP/s for the time estimate (None: timing.PHONE_*)


# what the estimate suggests when generation does not fit training's footprint (compile's flags): the decoder on
# tiles, FLUX's attention in query chunks and its MLPs in token chunks (FLUX.1-dev at 1024 px: benchmarks/results/
# generation_estimate.md; the exported block programs' planned arenas under these chunks: generation_chunks.md); a
# flag the request already sets at a smaller value keeps it
GENERATION_ADVICE = {"decode_tile_px": 256, "attention_chunk": 128, "mlp_chunk": 1024}
FLUX_ONLY_ADVICE = ("attention_chunk", "mlp_chunk")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


_TRACED_STEPS: dict[tuple[str, str, str], StepTrace] = {}


def traced_step(cfg: StepConfig, attention: str, backend: str) -> StepTrace:
    """The training step's trace (memory.trace_step: the whole step on fake tensors, ~10 s at SANA-1600M's size),
    once per process for a step: requests to estimate_memory in one process that differ only in the subject stage's,
    generation's or the weights' options (a caller comparing them, as the tests do) share it. A StepTrace is only
    read after it is made."""
    key = (repr(cfg), attention, backend)
    if key not in _TRACED_STEPS:
        _TRACED_STEPS[key] = trace_step(cfg, attention=attention, backend=backend)
    return _TRACED_STEPS[key]


def estimate_memory(req: EstimateRequest) -> dict:
    if req.precision not in PRECISIONS:
        raise UserError(f"--precision {req.precision!r}: expected one of {', '.join(PRECISIONS)}")
    if req.attention not in ("math", "flash"):
        raise UserError(f"--attention {req.attention!r}: expected 'math' or 'flash'")
    if req.steps < 1 or req.grad_accum < 1:
        raise UserError(f"--steps {req.steps} / --grad-accum {req.grad_accum}: expected >= 1")
    if req.runtime_overhead_mib < 0:
        raise UserError(f"--runtime-overhead-mib {req.runtime_overhead_mib}: expected >= 0")
    if req.backend not in TRAIN_BACKENDS:
        raise UserError(f"--backend {req.backend!r}: expected one of {', '.join(TRAIN_BACKENDS)}")
    if req.phone_gflops is not None and not req.phone_gflops > 0:
        raise UserError(f"--phone-gflops {req.phone_gflops}: expected a positive GFLOP/s figure")
    if req.subject_photos < 1:
        raise UserError(f"--subject-photos {req.subject_photos}: expected >= 1")
    if req.generation_steps < 1:
        raise UserError(f"--generation-steps {req.generation_steps}: expected >= 1")
    if req.weights not in WEIGHTS:
        raise UserError(f"--weights {req.weights!r}: expected one of {', '.join(WEIGHTS)}")
    every = remat_every(req.remat)
    spec = resolve_spec(req.model)
    c = spec.transformer_config
    num_blocks = int(c["num_layers"]) + int(c.get("num_single_layers", 0))
    plan = split_for_ratio(num_blocks, req.skip_ratio, req.skip_front, req.skip_back)
    cfg = StepConfig(spec, resolution_px=req.resolution_px or spec.train_px,
                     text_tokens=req.text_tokens or spec.text.seq_len, n_front=plan.n_front, n_back=plan.n_back,
                     rank=req.rank, precision=req.precision, remat=req.remat)
    cfg.validate()
    trace = traced_step(cfg, req.attention, req.backend)
    memory = MemoryEstimate.from_trace(trace, int(req.runtime_overhead_mib * MIB), req.weights)
    mj = memory.to_json()
    summary = (f"footprint {mj['footprint_gib']} GiB (dirty anonymous: LoRA/AdamW/grad sums "
               f"{round(mj['lora_params_gib'] + mj['adamw_states_gib'] + mj['gradient_sums_gib'], 3)} + arena "
               f"{mj['activation_arena_gib']} + inputs {mj['step_inputs_gib']} + program state "
               f"{mj['program_state_gib']} + program inputs {mj['program_inputs_gib']} + XNNPACK workspace "
               f"{mj['xnnpack_workspace_gib']} + overhead "
               f"{mj['runtime_overhead_gib']}" + ("" if req.weights == "mapped" else
                                                  f" + frozen weights {mj['frozen_weights_gib']}") + ")"
               + (f"; frozen weights {mj['frozen_weights_gib']} GiB mapped (file-backed, working set "
                  f"{mj['file_backed_working_set_gib']} GiB)" if req.weights == "mapped" else ""))
    generation = {}
    if req.attention_chunk is not None and req.attention_chunk < 1:
        raise UserError(f"--attention-chunk {req.attention_chunk}: expected a positive number of query tokens")
    if req.mlp_chunk is not None and req.mlp_chunk < 1:
        raise UserError(f"--mlp-chunk {req.mlp_chunk}: expected a positive number of tokens")
    for px in req.generation_px:
        from .generation import GenerationConfig, generation_estimate
        if px < spec.pixel_multiple or px % spec.pixel_multiple:
            raise UserError(f"--generation-px {px}: expected a positive multiple of {spec.pixel_multiple}")
        options = {"decode_tile_px": req.decode_tile_px, "attention_chunk": req.attention_chunk,
                   "mlp_chunk": req.mlp_chunk}

        def gen_estimate(o: dict) -> dict:
            return generation_estimate(GenerationConfig(spec, px, cfg.text_tokens, req.precision, **o),
                                       int(req.runtime_overhead_mib * MIB), req.attention,
                                       sampler_steps=req.generation_steps)
        g = gen_estimate(options)
        g["training_footprint_bytes"] = memory.footprint_bytes          # the same request's step, its --weights
        g["within_training_footprint"] = g["footprint_bytes"] <= memory.footprint_bytes
        advice = {k: v for k, v in GENERATION_ADVICE.items() if (options[k] is None or options[k] > v)
                  and (spec.arch == FLUX_ARCH or k not in FLUX_ONLY_ADVICE)}     # smaller tiles / chunks: less
        a = gen_estimate({**options, **advice}) if advice and not g["within_training_footprint"] else None
        if a is not None and a["footprint_bytes"] < g["footprint_bytes"]:   # the flags that lower it, and by what
            g["advice"] = {"compile_flags": " ".join(f"{_flag(k)} {v}" for k, v in advice.items()),
                           "footprint_bytes": a["footprint_bytes"], "footprint_gib": a["footprint_gib"],
                           "arenas_bytes": a["arenas_bytes"],
                           "within_training_footprint": a["footprint_bytes"] <= memory.footprint_bytes}
        generation[str(px)] = g
    doc = {
        "model": spec.name,
        "summary": summary,
        "plan": {"num_blocks": num_blocks, "n_front": plan.n_front, "n_back": plan.n_back,
                 "kept": [plan.n_front, num_blocks - plan.n_back], "skip_ratio": round(plan.skip_ratio, 4),
                 "split_chosen_by": plan.chosen_by},
        "step": {"resolution_px": cfg.resolution_px, "image_tokens": cfg.image_tokens,
                 "text_tokens": cfg.text_tokens, "rank": cfg.rank, "precision": cfg.precision,
                 "compute_dtype": "bf16" if cfg.precision == "bf16" else "fp32", "attention": req.attention,
                 "dequant_recomputed_in_backward": cfg.precision in ("int8", "int4"),
                 "remat": req.remat, "weights": req.weights, "backend": req.backend},
        "memory": mj,
        "weight_reads": weight_reads(trace, every),
        "activation_detail": {"saved_activations_bytes": trace.saved_activations_bytes,
                              "lora_grads_bytes": trace.lora_grads_bytes,
                              "cache_entry_bytes": trace.cache_entry_bytes,
                              "text_conditioning_bytes": trace.text_conditioning_bytes},
        "storage": storage_estimate(trace, req.steps * req.grad_accum),
        "params": {"frozen_kept": trace.frozen_param_count, "lora": trace.lora_param_count},
        "tflops_per_sample": round(trace.flops / 1e12, 4),
        "flops_per_sample": trace.flops,
        **({"generation": generation} if generation else {}),
        "counts": "footprint_bytes (dirty anonymous: what a phone counts) = LoRA + AdamW states + gradient sums + "
                  "activation arena (traced step peak, incl. LoRA grads; with remat the segment boundaries and one "
                  "segment's internals) + step inputs + program state (per instruction and XNNPACK delegate, "
                  "counted on the trace) + program inputs (the program's planned copy of the step inputs) + "
                  "XNNPACK workspace (the largest operand a bmm delegate packs) + runtime overhead (assumed) "
                  "[+ frozen weights when resident]; "
                  "file_backed_bytes = frozen weights when mapped; peak_bytes = footprint + the file-backed working "
                  "set (one kept block's frozen weights + embedders and head)",
    }
    if req.subject_stage:
        from .subject import subject_stage_estimate
        CacheCodec.parse(req.cache_codec)
        doc.update(subject_stage_estimate(cfg, mj, trace.flops, int(req.runtime_overhead_mib * MIB),
                                          req.steps * req.grad_accum, req.grad_accum, req.cache_codec, req.weights,
                                          req.forward_precision, req.encode_tile_px, req.encode_backend,
                                          req.encode_stages, tuple(map(tuple, req.photo_sizes)),
                                          req.subject_photos))
    from .timing import PHONE_GFLOPS, time_estimate
    doc["time"] = time_estimate(doc, req.steps, req.grad_accum, req.phone_gflops or PHONE_GFLOPS)
    return doc
