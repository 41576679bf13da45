"""Predicted memory of generation on a device, as the runtime runs it (runtime/generation.py), from the architecture
alone: the full transformer one block at a time, every program at batch 1 with the classifier-free guidance branches
(uncond, cond) run one after the other through each block, every frozen weight memory-mapped from the bundle's file
(the LoRA'd linears merged into a second mapped file).

    footprint_bytes  (dirty anonymous: what a phone counts)
               = program_arena      the largest of: embed's, one block's (per block kind), head's traced transient
                                    peak at batch 1 (dequantized weights included: int8/int4 are dequantized in the
                                    graph), the weights themselves excluded (inputs read in place from the mapping);
                                    traced as the exported XNNPACK programs run (export/executorch_preprocess.py
                                    lower_matmul_program; tracker.py weight_transposes "xnnpack"; the codes are
                                    the program's inputs, read in place: no copy before their cast), with graph
                                    lifetimes (tracker.graph_peak_bytes), plus XNNPACK's workspace (the largest
                                    operand one of the program's bmm delegates packs)
               + streams            what lives between programs: each branch's streams and context at batch 1 (FLUX:
                                    img, txt, temb, rotary; SANA: img, timestep, caption, caption bias) plus one
                                    branch's block outputs while they are written, x, each branch's v and the
                                    conditioning of both prompts
               + runtime_overhead   the process (given, as for training)
    file_backed_bytes = every block's frozen weights + embedders + head at the precision (the whole model: a picture
                        needs the skipped blocks too); working set: one block's + embedders and head

    decode phase  = the decode program's planned arena on its largest tile (the whole latent unless decode_tile_px
                    asks for tiles: runtime/tiling.py; every other tile shape is a part of it), plus on XNNPACK
                    (decode_backend, compile's default) its workspace (the largest im2col band a convolution's bmm
                    packs: models/conv_matmul.py, replayed by its ConvsAsMatmuls), plus with tiles the
                    picture and two rows of decoded tiles (the decode programs run after the transformer programs
                    are dropped: footprint = the larger phase + the runtime overhead); real-size models use their
                    published autoencoder configs (subject.py AUTOENCODER_CONFIGS, meta device). The arena is
                    ExecuTorch's greedy plan of the portable program's buffers (xnnpack_program.ProgramOps portable:
                    the decoder's ops as export/generation_stage.py _decode_part exports them, every view but a
                    reshape a copy; greedy_arena_bytes), not a trace's live peak: the planner puts the live buffers
                    in more room (SANA-1600M's DC-AE at a 256 px tile: 192 MiB planned, as its bundle's program;
                    139 MiB of the program's buffers live at once; 144.5 MiB in the eager trace counted before).
                    The weights are the program's inputs, read in place from the mapped decoder file (file-backed),
                    as plain tensors: F.linear on a permuted activation is then matmul's broadcast bmm with the
                    weight expanded per row (an expand_copy as large as the weight times the rows: DC-AE's attention
                    projections), as in the program

    text phase    = for a model whose prompt goes through real encoders (text kind "pipeline": FLUX.1-dev's CLIP +
                    T5-XXL, SANA's Gemma-2), the largest encoder program's traced peak plus both prompts'
                    conditioning (memory_estimate/text.py); the runtime drops the text programs before sampling,
                    so the footprint is the largest of the three phases + the runtime overhead; their weights are
                    file-backed and reported apart (text_file_backed_bytes)

FLOPs of a picture (`flops`, FlopCounterMode on the same traces: matmuls, convolutions, attention): every sampler
step runs embed + every block + head once per guidance branch; the decoder runs once (per tile); the text
encoders' FLOPs are not counted (they run once per picture, before sampling).

Not modeled: flux-testbed's MiniLM encoder (22.7M parameters).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from ..models.attention import chunked_attention
from ..models.loading import build_transformer
from ..models.specs import FLUX_ARCH, ModelSpec
from ..models.token_chunks import chunked_mlp
from ..models.views import block_names_of, make_view
from ..quantize import QuantSpec, quantize_frozen_layers
from .memory import GIB, _sdpa_context
from .program import quantize_direct_layers
from .tracker import StepMemoryTracker, storage_keys

CFG_BRANCHES = 2          # uncond, cond: one after the other through each program (runtime/generation.py)
PROGRAM_BATCH = 1


@dataclass(frozen=True)
class GenerationConfig:
    spec: ModelSpec
    resolution_px: int
    text_tokens: int
    precision: str = "int8"
    decode_tile_px: int | None = None      # the decoder runs on tiles of this side (compile --decode-tile-px)
    attention_chunk: int | None = None     # attention in query chunks (compile --attention-chunk)
    mlp_chunk: int | None = None           # FLUX blocks' MLPs in token chunks (compile --mlp-chunk)
    decode_backend: str = "xnnpack"        # the decode programs' (GenerationPrograms.backend): "xnnpack" (the
                                           # convolutions as im2col bands + bmm, export/conv_matmul.py) | "portable"

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        c = self.spec.transformer_config
        side = self.resolution_px // self.spec.vae_scale_factor
        ch = int(c["in_channels"]) // 4 if self.spec.arch == FLUX_ARCH else int(c["in_channels"])
        return (PROGRAM_BATCH, ch, side, side)


def _nbytes(tensors) -> int:
    seen, n = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata not in seen:
            seen.add(t.untyped_storage()._cdata)
            n += t.numel() * t.element_size()
    return n


def _module_bytes(m: torch.nn.Module) -> int:
    return _nbytes(list(m.parameters()) + [b for b in m.buffers() if b is not None])


def _streams_bytes(streams: dict, ctx) -> int:
    ctx_tensors = [v for v in vars(ctx).values() if isinstance(v, torch.Tensor)]
    ctx_tensors += [t for v in vars(ctx).values() if isinstance(v, tuple) for t in v if isinstance(t, torch.Tensor)]
    return _nbytes(list(streams.values()) + ctx_tensors)


def trace_generation(cfg: GenerationConfig, attention: str = "math") -> dict:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode
    spec = cfg.spec
    transformer = build_transformer(spec, "meta").requires_grad_(False)
    view = make_view(spec.arch, transformer)
    names = block_names_of(transformer)
    kinds: dict[str, int] = {}
    for i, n in enumerate(names):
        kinds.setdefault("single" if n.startswith("single_") else "double" if spec.arch == FLUX_ARCH else "sana", i)
    non_block = [m for n, m in view.named_children() if n != "blocks"]
    quant = QuantSpec(cfg.precision) if cfg.precision in ("int8", "int4") else None
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    c = spec.transformer_config
    with fake, torch.no_grad():
        for m in non_block + [view.blocks[i] for i in kinds.values()]:
            m.to_empty(device="cpu")
            if quant is not None:
                quantize_frozen_layers(m, quant)
        quantize_direct_layers(view, quant)
        non_block = [m for n, m in view.named_children() if n != "blocks"]
        for name, p in list(view.named_parameters(recurse=False)):
            setattr(view, name, torch.nn.Parameter(torch.zeros(p.shape), requires_grad=False))
        b, L = PROGRAM_BATCH, cfg.text_tokens
        x = torch.zeros(cfg.latent_shape)
        t = torch.full((b,), 0.5)
        if spec.arch == FLUX_ARCH:
            cond = {"txt": torch.zeros(b, L, int(c["joint_attention_dim"])),
                    "pooled": torch.zeros(b, int(c["pooled_projection_dim"]))}
            if c.get("guidance_embeds"):
                cond["guidance"] = torch.full((b,), 3.5)
        else:
            cond = {"txt": torch.zeros(b, L, int(c["caption_channels"])), "txt_mask": torch.ones(b, L)}
        weights = [p for m in non_block for p in list(m.parameters()) + list(m.buffers())]
        weights += list(view.parameters(recurse=False))
        def program_peak(tracker) -> int:
            return tracker.graph_peak_bytes() + tracker.workspace_bytes

        with _sdpa_context(attention), chunked_attention(cfg.attention_chunk):
            tr = StepMemoryTracker(storage_keys(weights + [x, t, *cond.values()]), weight_transposes="xnnpack", codes_copies=False)
            fc = FlopCounterMode(display=False)
            with tr, fc:
                streams, ctx = view.embed(view.pack(x), t, cond)
            arenas = {"embed": program_peak(tr)}
            flops = {"embed": int(fc.get_total_flops())}
            resident = _streams_bytes(streams, ctx)
            keep = list(streams.values()) + [v for v in vars(ctx).values() if isinstance(v, torch.Tensor)]
            keep += [u for v in vars(ctx).values() if isinstance(v, tuple) for u in v]
            block_bytes = {}
            for kind, i in kinds.items():
                block = view.blocks[i]
                bw = list(block.parameters()) + [bb for bb in block.buffers() if bb is not None]
                block_bytes[kind] = _module_bytes(block)
                tr = StepMemoryTracker(storage_keys(bw + keep), weight_transposes="xnnpack", codes_copies=False)
                fc = FlopCounterMode(display=False)
                with chunked_mlp(block, cfg.mlp_chunk), tr, fc:
                    out = view.run_block(block, streams, ctx)
                arenas[f"block.{kind}"] = program_peak(tr)
                flops[f"block.{kind}"] = int(fc.get_total_flops())
            tr = StepMemoryTracker(storage_keys(keep + weights), weight_transposes="xnnpack", codes_copies=False)
            fc = FlopCounterMode(display=False)
            with tr, fc:
                v = view.head(out, ctx)
            arenas["head"] = program_peak(tr)
            flops["head"] = int(fc.get_total_flops())
    per_block = [block_bytes["single" if n.startswith("single_") else "double" if spec.arch == FLUX_ARCH else "sana"]
                 for n in names]
    non_block_bytes = sum(_module_bytes(m) for m in non_block) + _nbytes(list(view.parameters(recurse=False)))
    latents = 2 * _nbytes([x]) + CFG_BRANCHES * (_nbytes([v]) + _nbytes(list(cond.values())))
    kind_of = ["single" if n.startswith("single_") else "double" if spec.arch == FLUX_ARCH else "sana" for n in names]
    branch_flops = flops["embed"] + flops["head"] + sum(flops[f"block.{k}"] for k in kind_of)
    return {"arenas_bytes": arenas, "flops_per_sampler_step": CFG_BRANCHES * branch_flops, "flops_detail": flops, "streams_bytes": resident, "latents_and_cond_bytes": latents,
            "cond_bytes": CFG_BRANCHES * _nbytes(list(cond.values())),
            "frozen_weights_bytes": sum(per_block) + non_block_bytes, "largest_block_bytes": max(block_bytes.values()),
            "non_block_bytes": non_block_bytes, "image_tokens": (cfg.resolution_px // spec.pixel_multiple) ** 2}


def decoder_config(spec: ModelSpec) -> dict | None:
    if spec.vae_config is not None:
        return dict(spec.vae_config)
    from .subject import AUTOENCODER_CONFIGS
    return AUTOENCODER_CONFIGS.get(spec.name, AUTOENCODER_CONFIGS["sana"] if spec.arch != FLUX_ARCH else None)


def decoder_program_memory(arch: str, vae_config: dict, tile_hw: tuple[int, int],
                           conv_band_bytes: int | None = None) -> dict:
    """The decode program of one latent tile [1, C, h, w] (export/generation_stage.py _decode_part; weights its
    inputs, not planned; the image planned) as xnnpack_program.program_memory_of counts it: arena_bytes
    (ExecuTorch's greedy plan), arena_live_bytes (its buffers' live peak), workspace_bytes (XNNPACK's: the largest
    operand one of its bmm delegates packs; 0 on the portable kernels), delegates (its bmm: one per band of every
    convolution), and the decode's FLOPs. conv_band_bytes
    None: the portable program; else the XNNPACK one (export/conv_matmul.py: every convolution as im2col bands of
    at most that many bytes + a bmm, replayed by its ConvsAsMatmuls). Meta weights, fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    from ..models.latents import LatentEncoder
    from ..models.loading import vae_class
    from .xnnpack_program import portable_program_memory
    with torch.device("meta"):
        vae = vae_class(arch).from_config(vae_config).eval()
    fc = FlopCounterMode(display=False)
    convs = contextlib.nullcontext()
    if conv_band_bytes is not None:
        from ..models.conv_matmul import ConvsAsMatmuls     # the exporter's own decomposition (one definition)
        convs = ConvsAsMatmuls(conv_band_bytes)
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        vae = vae.to_empty(device="cpu").requires_grad_(False)     # plain inputs, as export's Decode passes them
        x = torch.zeros(1, int(vae_config["latent_channels"]), *tile_hw)
        outside = list(vae.parameters()) + list(vae.buffers()) + [x]
        program = portable_program_memory(lambda: LatentEncoder(arch, vae).decode(x).contiguous(), outside, [],
                                          below=[fc], above=[convs])
    return {"arena_bytes": program["arena_bytes"], "arena_live_bytes": program["arena_live_bytes"],
            "workspace_bytes": getattr(convs, "packed_bytes", 0), "delegates": getattr(convs, "matmuls", 0),
            "convolutions_rewritten": getattr(convs, "convs", 0), "flops": int(fc.get_total_flops())}


def trace_decoder(cfg: GenerationConfig) -> dict | None:
    """The decode phase: the decode program's planned arena on its largest tile (decoder_program_memory; weights
    excluded: read in place from the mapped decoder file), plus, when tiled, what runtime/tiling.py holds beside it
    (the picture and two rows of decoded tiles)."""
    from ..models.latents import decode_tiling
    from ..runtime.tiling import tile_starts
    vc = decoder_config(cfg.spec)
    if vc is None:
        return None
    side = cfg.resolution_px // cfg.spec.vae_scale_factor
    tiling = decode_tiling(cfg.spec, side, cfg.decode_tile_px)
    tile = tiling["tile_latent"]
    px_tile = tile * tiling["scale"]
    tiles_per_row = len(tile_starts(side, tiling["stride_latent"]))
    held = (3 * cfg.resolution_px ** 2 + 2 * tiles_per_row * 3 * px_tile ** 2) * 4 if tiling["tiled"] else 0
    out = {"tiling": tiling, "tile_px": px_tile, "tiles": tiles_per_row ** 2, "held_pixels_bytes": held}
    if vc.get("kind") == "pixel":
        return {**out, "arena_bytes": 0, "arena_live_bytes": 0, "workspace_bytes": 0, "phase_bytes": held}
    band = None
    if cfg.decode_backend == "xnnpack":
        from ..models.conv_matmul import DEFAULT_BAND_BYTES     # what export/generation_stage.py _decode_part uses
        band = DEFAULT_BAND_BYTES
    program = decoder_program_memory(cfg.spec.arch, vc, (tile, tile), band)
    return {**out, "arena_bytes": program["arena_bytes"], "arena_live_bytes": program["arena_live_bytes"],
            "workspace_bytes": program["workspace_bytes"], "backend": cfg.decode_backend,
            "phase_bytes": program["arena_bytes"] + program["workspace_bytes"] + held,
            "flops": program["flops"] * out["tiles"]}


def generation_estimate(cfg: GenerationConfig, runtime_overhead_bytes: int, attention: str = "math",
                        text_precision: str = "fp32", sampler_steps: int = 20) -> dict:
    """sampler_steps: the picture's FLOPs count this many sampler steps (compile --generation-steps' default)."""
    from .text import text_phase_estimate
    tr = trace_generation(cfg, attention)
    arena = max(tr["arenas_bytes"].values())
    # streams: every branch's, plus one branch's block outputs while they are written (its inputs stay alive)
    streams = (CFG_BRANCHES + 1) * tr["streams_bytes"]
    transformer_phase = arena + streams + tr["latents_and_cond_bytes"]
    decoder = trace_decoder(cfg)
    decode_phase = decoder["phase_bytes"] if decoder else None
    text = (text_phase_estimate(cfg.spec, cfg.text_tokens, tr["cond_bytes"], text_precision)
            if cfg.spec.text.kind == "pipeline" else None)
    text_phase = text["phase_bytes"] if text else None
    footprint = max(transformer_phase, decode_phase or 0, text_phase or 0) + runtime_overhead_bytes
    working = tr["largest_block_bytes"] + tr["non_block_bytes"]
    out = {"resolution_px": cfg.resolution_px, "image_tokens": tr["image_tokens"], "text_tokens": cfg.text_tokens,
           "cfg_branches": CFG_BRANCHES, "program_batch": PROGRAM_BATCH, "precision": cfg.precision, "program_arena_bytes": arena,
           "arenas_bytes": tr["arenas_bytes"], "streams_bytes": streams,
           "latents_and_cond_bytes": tr["latents_and_cond_bytes"], "runtime_overhead_bytes": runtime_overhead_bytes,
           "transformer_phase_bytes": transformer_phase, "decoder_bytes": decode_phase,
           "decoder_arena_bytes": decoder["arena_bytes"] if decoder else None,
           "decoder_arena_live_bytes": decoder["arena_live_bytes"] if decoder else None,
           "decoder_workspace_bytes": decoder["workspace_bytes"] if decoder else None,
           "decode_tiling": {k: v for k, v in decoder.items() if not k.endswith("_bytes")} if decoder else None,
           "footprint_bytes": footprint, "file_backed_bytes": tr["frozen_weights_bytes"],
           "sampler_steps": sampler_steps, "flops_per_sampler_step": tr["flops_per_sampler_step"],
           "decoder_flops": decoder.get("flops", 0) if decoder else 0,
           "flops_per_picture": sampler_steps * tr["flops_per_sampler_step"] + (decoder.get("flops", 0) if decoder
                                                                               else 0),
           "flops_not_counted": ["text encoders (once per picture)"],
           "file_backed_working_set_bytes": working, "peak_bytes": footprint + working,
           "text_phase_bytes": text_phase, "text_arena_bytes": text["arena_bytes"] if text else None,
           "text_file_backed_bytes": text["file_backed_bytes"] if text else None,
           "text_encoders": text["encoders"] if text else None, "text_precision": text_precision if text else None,
           "not_modeled": ([] if text or cfg.spec.text.kind == "hash" else [f"{cfg.spec.text.kind} text encoder"])
           + (["autoencoder decoder (no config)"] if decoder is None else [])}
    out.update({k.replace("_bytes", "_gib"): round(v / GIB, 3) for k, v in list(out.items())
                if k.endswith("_bytes") and isinstance(v, int)})
    return out


def data_resolution(spec: ModelSpec) -> int:
    """The resolution a user generates at: the model's data resolution (FLUX 512, SANA 1024 here)."""
    m = spec.pixel_multiple
    return int(math.ceil(spec.data_px / m) * m)
