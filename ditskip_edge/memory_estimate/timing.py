"""Time a user will wait, ESTIMATED from FLOPs and a stated throughput (issue 57).

FLOPs are counted on the same fake-tensor traces as the memory estimate (torch's FlopCounterMode: matmuls,
convolutions, attention; elementwise work is not counted):
  - a training step, per sample (forward + backward of the kept blocks, the block remat's recomputed forward included:
    memory.trace_step), as benchmarks/memory_speed.py counts it
  - the subject stage, per sample (encoder + embedders + the skipped blocks the residuals need, forward only:
    subject.py), when the estimate has it (--subject-stage)
  - a generated picture (every sampler step: embed + all blocks + head per guidance branch; the decoder once:
    generation.py), when the estimate has it (--generation-px)

Time = FLOPs / throughput, with two stated throughputs:
  - this machine: the training program's measured GFLOP/s (benchmarks/throughput.py -> benchmarks/results/
    throughput.md: the headline layouts' XNNPACK remat program, 1 thread, FLOPs per CPU second), HOST_* below.
  - a phone: a PUBLISHED single-core fp32 GEMM kernel figure (PHONE_*) times this machine's measured efficiency of
    the training program against its own fp32 GEMM kernel (HOST_STEP_GFLOPS / HOST_GEMM_GFLOPS): the program keeps
    the fraction of the kernel's peak it keeps here. One core, one thread; a phone's other big cores, its thermal
    limits and its memory bandwidth are not modeled. Give another phone with --phone-gflops (its fp32 GEMM GFLOP/s).
A picture: the transformer's programs run their matmuls on XNNPACK as the training program does (export/
executorch_preprocess.py lower_matmul_program), timed at the training program's throughput; the decoder at the
measured throughput of its own program (benchmarks/decode_tiles.py, scaled likewise): on XNNPACK (compile's default:
its convolutions as im2col bands + bmm, models/conv_matmul.py) HOST_DECODE_GFLOPS, on the portable kernels
HOST_PORTABLE_DECODE_GFLOPS (50x slower: the portable convolution is not the portable training program's matmul).
"""

from __future__ import annotations

# A phone class with a published fp32 GEMM throughput. gemmlowp's GEMM kernel benchmark
# (github.com/google/gemmlowp standalone/neon-gemm-kernel-benchmark.cc) links its results spreadsheet
# (docs.google.com/spreadsheets/d/1UPbzbp9rdsD6RXxOr5q6AZ0n1omgEknLYO2ogiw6Kqk): one thread on the Pixel XL's big
# core (Snapdragon 821, Kryo, 2.15 GHz), NEON_64bit_GEMM_Float32_WithScalar 14.78 Gop/s (an op = one multiply or
# add, i.e. FLOP/s). A 2016 flagship's single core: a conservative floor for today's phones, not a typical one.
PHONE_GFLOPS = 14.78
PHONE_CLASS = "2016 flagship Android phone, one big core (Pixel XL: Snapdragon 821 Kryo, 2.15 GHz)"
PHONE_SOURCE = ("gemmlowp GEMM kernel benchmark, fp32 NEON kernel, one thread: 14.78 GFLOP/s "
                "(docs.google.com/spreadsheets/d/1UPbzbp9rdsD6RXxOr5q6AZ0n1omgEknLYO2ogiw6Kqk, linked from "
                "github.com/google/gemmlowp standalone/neon-gemm-kernel-benchmark.cc)")

# This machine, measured by benchmarks/throughput.py (benchmarks/results/throughput.md): the XNNPACK training
# program's FLOPs per CPU second (1 thread, headline FLUX layout, BlockSkip 50%, int8, block remat), the portable
# program's, and ExecuTorch's XNNPACK fp32 GEMM kernel alone (one linear, 1 thread). Measured 2026-12-07 on a shared
# 2-core AMD EPYC (CPU seconds, not wall): the mean of the FLUX and SANA layouts' et_remat rows; the XNNPACK rows
# from benchmarks/step_profile.py's default program after issue 57's step work (11:00 UTC; 40.51 before it), the
# portable rows from device_footprint_headline_portable.json (07:25 UTC).
HOST_STEP_GFLOPS = 71.05
HOST_PORTABLE_GFLOPS = 18.27
HOST_GEMM_GFLOPS = 97.93
HOST_SOURCE = "benchmarks/results/throughput.md (benchmarks/throughput.py)"
# Generation's decode program on one 256-px tile, the decoder's FLOPs (generation.decoder_program_memory) per CPU
# second of the call (benchmarks/results/decode_tiles.md, 2026-12-07 20:11-20:44 UTC, 1 thread, a machine at load
# 4-6): XNNPACK, the mean of SANA-1600M's DC-AE (523.0 GFLOP in 11.12 s: 47.0) and FLUX.1-dev's AutoencoderKL
# (622.3 GFLOP in 9.05 s: 68.8); portable, the mean of the same DC-AE tile in the same window (1,394.6 s: 0.375)
# and the FLUX generate of benchmarks/results/real_scale.md (1,782 CPU s for the whole process, mostly its decode:
# 0.349, a lower bound).
HOST_DECODE_GFLOPS = 57.9
HOST_PORTABLE_DECODE_GFLOPS = 0.362
DECODE_SOURCE = "benchmarks/results/decode_tiles.md (benchmarks/decode_tiles.py)"


def host_figures() -> dict:
    return {"step": HOST_STEP_GFLOPS, "portable": HOST_PORTABLE_GFLOPS, "gemm": HOST_GEMM_GFLOPS,
            "decode": HOST_DECODE_GFLOPS, "decode_portable": HOST_PORTABLE_DECODE_GFLOPS}


def host_efficiency(portable: bool = False, host: dict | None = None, program: str | None = None) -> float:
    """A program's throughput as a fraction of this machine's fp32 GEMM kernel: the training program's (XNNPACK, or
    portable), or `program` given: a key of host_figures() ("decode", "decode_portable")."""
    h = {**host_figures(), **(host or {})}
    step = h[program] if program else h["portable"] if portable else h["step"]
    return step / h["gemm"] if h["gemm"] else 0.0


def _seconds(flops: float, gflops: float) -> float | None:
    return round(flops / (gflops * 1e9), 3) if gflops > 0 else None


def time_estimate(doc: dict, steps: int, grad_accum: int, phone_gflops: float = PHONE_GFLOPS,
                  host_figs: dict | None = None) -> dict:
    """The estimate's `time` section from its FLOP figures (doc: estimate_memory's document so far). Personalizing =
    the subject stage over every sample of the schedule (steps x grad_accum, the residual cache's entries) + the
    training steps; a picture = generation's FLOPs at the first --generation-px. host_figs: this machine's GFLOP/s
    {"step", "portable", "gemm", "decode", "decode_portable"} (default: HOST_*; benchmarks/throughput.py passes what
    it just measured, the rest from HOST_*)."""
    hf = {**host_figures(), **(host_figs or {})}
    host = hf["step"]
    gen = doc.get("generation") or {}
    first = next(iter(gen.values()), None)
    decode_key = "decode" if ((first or {}).get("decode_tiling") or {}).get("backend") == "xnnpack" \
        else "decode_portable"
    eff, eff_decode = host_efficiency(host=hf), host_efficiency(host=hf, program=decode_key)
    phone = phone_gflops * eff
    phone_decode = phone_gflops * eff_decode
    samples = steps * grad_accum
    train = doc["flops_per_sample"] * samples
    subject = doc.get("subject_stage", {}).get("forward_flops_per_sample")
    flops = {"training_step_per_sample": doc["flops_per_sample"], "training": train,
             "subject_stage_per_sample": subject,
             "subject_stage": subject * samples if subject is not None else None}
    personalize = train + (flops["subject_stage"] or 0)
    flops["personalize"] = personalize
    picture = first["flops_per_picture"] if first else None
    decoder = (first.get("decoder_flops") or 0) if first else 0
    flops["picture"] = picture
    flops["picture_decoder"] = decoder if first else None

    def picture_seconds(gf: float, gf_decode: float) -> float | None:
        if picture is None or gf <= 0 or gf_decode <= 0:
            return None
        return _seconds(picture - decoder, gf) + _seconds(decoder, gf_decode)

    def times(gf: float, gf_decode: float) -> dict:
        out = {"gflops": round(gf, 3), "training_step_seconds": _seconds(doc["flops_per_sample"] * grad_accum, gf),
               "training_minutes": _min(_seconds(train, gf)),
               "subject_stage_minutes": _min(_seconds(flops["subject_stage"], gf)) if subject is not None else None,
               "personalize_minutes": _min(_seconds(personalize, gf)),
               "picture_minutes": _min(picture_seconds(gf, gf_decode)),
               "picture_gflops_decoder": round(gf_decode, 3)}
        return out

    return {"estimate": True, "samples": samples, "steps": steps, "grad_accum": grad_accum,
            "personalize_includes": "training" + (" + subject stage" if subject is not None else
                                                  " (no subject stage: add --subject-stage)"),
            "picture_at_px": int(first["resolution_px"]) if first else None,
            "flops": flops,
            "decoder_backend": "xnnpack" if decode_key == "decode" else "portable", "decoder_source": DECODE_SOURCE,
            "this_machine": {**times(host, hf[decode_key]), "source": HOST_SOURCE,
                             "note": "1 thread; the XNNPACK training program's measured FLOPs per CPU second"},
            "phone": {**times(phone, phone_decode), "class": PHONE_CLASS if phone_gflops == PHONE_GFLOPS
                      else "given (--phone-gflops)", "gemm_gflops": phone_gflops,
                      "source": PHONE_SOURCE if phone_gflops == PHONE_GFLOPS else "--phone-gflops",
                      "efficiency": round(eff, 3), "efficiency_decoder": round(eff_decode, 4),
                      "note": "the phone's fp32 GEMM GFLOP/s x this machine's measured efficiency of the program "
                              "against its own GEMM kernel; one core, one thread; an estimate"}}


def _min(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60, 2)
