"""The program contract every device program follows, whatever runtime runs it (ExecuTorch, ONNX Runtime Training),
and the demo apps read (docs/bundle_contract.json is its machine-readable form).

A training program takes a flat, ordered list of tensors and returns the loss (scalar, output 0):

    x0                      [1, C, h, w]   clean latents of the sample (cache entry "x0", or the preprocessing
                                           program's output), float32
    noise                   [1, C, h, w]   rng.normal(sample.noise_seed, shape), float32
    t                       [1]            sample.t (rectified-flow time, 1 = noise), float32
    cond.<key>              ...            text conditioning, keys sorted, float32
    entry.<part>            ...            the cache entry's stored parts except "x0", names sorted, in the cache
                                           layout's dtype (the program decodes them itself)

A runtime computes, per scheduled sample, the loss and the gradients of the trainable (LoRA) parameters; the
training loop (runtime/loop.py) accumulates them over the step's samples (each divided by grad_accum) and runs
AdamW. Every program is one entry of the manifest's `programs` list (`ProgramEntry`): the same fields for every
runtime, `trainable` mapping the program's parameter names to the LoRA file's keys.

The subject stage's forward-only programs (ExecuTorch, `runtime/forward.py`; no gradients, frozen weights):

    encode    patch [1, 3, s_min, s_min] (runtime/patches.py's crop)                 -> x0 [1, C, h, w]
              tiled (manifest encode_tiling): encode.<h>x<w> per pixel tile, blended by runtime/tiling.py;
              staged (encode_tiling.stages > 1): each of those the chain <name>.s0 .. (encode_stage_names)
    embed     x0, noise, t, cond.<key> sorted (as train_step)                          -> stream.<s> sorted, ctx.<c> sorted
    block     stream.<s> sorted, ctx.<c> sorted (one program per block, `block` index) -> stream.<s> sorted

FLUX streams img, txt and ctx rotary_cos, rotary_sin, temb; SANA stream img and ctx timestep, txt (, txt_bias).
The front residual is stream - embedded stream after block n_front - 1, per stream; the back residual is img after
the last block minus img entering block num_blocks - n_back (skip_model.compute_residuals' definition).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .errors import BundleError, UserError

METHOD = "forward"
FIXED_INPUTS = ("x0", "noise", "t")
COND_PREFIX = "cond."
ENTRY_PREFIX = "entry."
RUNTIMES = ("executorch", "ort")
# Precision of the frozen weights: what a device program stores (fp32, int8 per output channel, packed int4 in
# groups of 32), and what the memory estimate can model (bf16 too: GPU baselines). Trainable LoRA stays fp32.
PROGRAM_PRECISIONS = ("fp32", "int8", "int4")
PRECISIONS = ("fp32", "bf16", "int8", "int4")
# Where a program's frozen weights live: "resident" inside the program file, loaded into anonymous memory; "mapped"
# in a data file beside it (ExecuTorch: the .ptd in the entry's `data`), memory-mapped: clean file-backed pages.
WEIGHT_PLACEMENTS = ("resident", "mapped")
TRAIN_STEP = "train_step"
PREPROCESS = "preprocess"
# The subject stage's forward-only programs (runtime/forward.py): the model's frozen forward, one block at a time.
ENCODE = "encode"              # patch [1, 3, s_min, s_min] -> x0; tiled (encode_tiling): "encode.<h>x<w>" per tile
EMBED = "embed"                # x0, noise, t, cond.* -> stream.* (entering block 0), ctx.* (what every block reads)
BLOCK = "block"                # stream.*, ctx.* -> stream.* (one transformer block; ProgramEntry.block = its index)
SUBJECT_PROGRAMS = (ENCODE, EMBED, BLOCK)
STREAM_PREFIX = "stream."
CTX_PREFIX = "ctx."
# Generation (runtime/generation.py): inference programs, inputs looked up by name (export/generation_modules.py)
TEXT_ENCODER = "text_encoder"      # the text encoder program (a pipeline's first: FLUX's CLIP, SANA's Gemma-2)
TEXT_ENCODER_2 = "text_encoder_2"  # FLUX's second (T5)
TEXT_HASH, TEXT_MINILM, TEXT_PIPELINE = "hash", "minilm", "pipeline"   # generation.text.kind
TEXT_KINDS = (TEXT_HASH, TEXT_MINILM, TEXT_PIPELINE)
GEN_EMBED = "gen_embed"
GEN_BLOCK = "gen_block"            # one program per block kind: "gen_block.<kind>" (double / single / sana)
GEN_HEAD = "gen_head"
DECODE = "decode"                  # one program per latent tile shape: "decode.<h>x<w>" (runtime/tiling.py)
DECODER_WEIGHTS = "decoder"        # decode's `w.<state>` inputs are `decoder.<state>` in generation.decode.weights
GENERATION_FORMAT_VERSION = 3      # 2: programs at batch 1, the guidance branches run one after the other;
                                   # 3: the decoder per tile, its weights in a mapped file (generation.decode)
CFG_BRANCHES = ("uncond", "cond")  # classifier-free guidance: v = v_uncond + g (v_cond - v_uncond)


def encode_name(tile_h_px: int, tile_w_px: int) -> str:
    """A tiled encode's program for one pixel tile shape: "encode.<h>x<w>" (the manifest's encode_tiling.programs)."""
    from .tiling import tile_key
    return f"{ENCODE}.{tile_key(tile_h_px, tile_w_px)}"


def encode_stage_names(name: str, stages: int) -> list[str]:
    """The programs of one encode (one pixel tile shape, or the whole crop): `name` itself, or with the encoder split
    into stages (compile --encode-stages; manifest encode_tiling.stages) "<name>.s0" .. "<name>.s<stages-1>", run in
    that order: stage 0 takes "patch", each later stage the previous one's "features", the last gives "x0"."""
    return [name] if stages <= 1 else [f"{name}.s{k}" for k in range(stages)]


def decode_name(tile_h: int, tile_w: int) -> str:
    from .tiling import tile_key
    return f"{DECODE}.{tile_key(tile_h, tile_w)}"


def step_input_names(cond_keys, entry_keys) -> list[str]:
    return (list(FIXED_INPUTS) + [COND_PREFIX + k for k in sorted(cond_keys)]
            + [ENTRY_PREFIX + k for k in sorted(entry_keys) if k != "x0"])


def lora_file_key(full_model_param_name: str, adapter: str = "default", prefix: str = "transformer") -> str:
    """'transformer_blocks.3.attn.to_q.lora_A.default.weight' -> 'transformer.transformer_blocks.3.attn.to_q.lora_A.weight'
    (peft's state-dict key without the adapter name, with diffusers' component prefix)."""
    return f"{prefix}." + full_model_param_name.replace(f".{adapter}.", ".")


@dataclass
class ProgramEntry:
    """One program in the manifest's `programs` list: what a runtime needs to call it."""
    name: str                       # "train_step" | "preprocess" | generation's (above)
    runtime: str                    # "executorch" | "ort"
    path: str                       # bundle-relative program file
    inputs: list[dict]              # [{name, shape, dtype}] in call order
    outputs: list[dict]
    method: str = METHOD
    trainable: dict[str, str] = field(default_factory=dict)         # program parameter name -> LoRA file key
    trainable_shapes: dict[str, list[int]] = field(default_factory=dict)
    precision: str = "fp32"         # frozen weights: fp32 | int8 | int4
    backend: str = "portable"       # executorch: portable | xnnpack; ort: cpu
    data: list[str] = field(default_factory=list)                  # bundle-relative files the program also loads:
                                    # executorch: the .ptd of its frozen weights (memory-mapped, not locked; empty
                                    # when the weights are inside the .pte); ort: the checkpoint
    remat: str = "none"             # block rematerialization the program runs: none | blocks | every:K
    block: int | None = None        # block programs: the block's index in the full model's order
    memory: dict | None = None
    ops: dict | None = None
    graph_passes: dict | None = None

    def to_json(self) -> dict:
        return asdict(self)


def block_input_names(stream_names, ctx_names) -> list[str]:
    """A block program's inputs: stream.* sorted, then ctx.* sorted (its outputs: stream.* sorted)."""
    return [STREAM_PREFIX + s for s in sorted(stream_names)] + [CTX_PREFIX + c for c in sorted(ctx_names)]
def check_precisions(precisions) -> None:
    """One device program per precision: distinct values among PROGRAM_PRECISIONS, at least one."""
    bad = [p for p in precisions if p not in PROGRAM_PRECISIONS]
    if bad or not precisions or len(set(precisions)) != len(precisions):
        raise UserError(f"--precision {','.join(precisions)}: expected distinct values among "
                        f"{', '.join(PROGRAM_PRECISIONS)}")


def find_program(programs: list[dict], name: str, runtime: str, precision: str | None = None,
                 where: str = "manifest.json") -> dict:
    """The first program with this name and runtime (and precision, if given)."""
    if runtime not in RUNTIMES:
        raise UserError(f"runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")
    if precision is not None and precision not in PROGRAM_PRECISIONS:
        raise UserError(f"precision {precision!r}: expected one of {', '.join(PROGRAM_PRECISIONS)}")
    for p in programs:
        if p.get("name") == name and p.get("runtime") == runtime and precision in (None, p.get("precision")):
            return p
    have = sorted({f"{p.get('runtime')}/{p.get('precision')}" for p in programs if p.get("name") == name})
    raise BundleError(f"{where}: no {runtime} {name} program{'' if precision is None else f' at {precision}'} "
                      f"(the bundle has: {', '.join(have) or 'none'}); compile with --runtime {runtime}"
                      f"{'' if precision is None else f' --precision {precision}'}")


def ordered_inputs(program: dict, named: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The program's inputs in call order, each checked against its spec's shape and given its dtype."""
    out = []
    for spec in program["inputs"]:
        a = named.get(spec["name"])
        if a is None:
            raise BundleError(f"program {program['path']}: input {spec['name']!r} has no source in the bundle")
        if list(np.shape(a)) != list(spec["shape"]):
            raise BundleError(f"program {program['path']}: input {spec['name']} has shape {list(np.shape(a))}, the "
                              f"program expects {spec['shape']}")
        out.append(np.ascontiguousarray(a, dtype=np.dtype(spec.get("dtype", "float32"))))
    return out
