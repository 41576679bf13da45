"""The subject stage on a device and the cache-free mode, predicted from the architecture alone (issue 15).

The subject stage (runtime/subject.py) runs, per scheduled sample: the encode program (the autoencoder's encoder on
the s_min crop), the embed program, then one block program at a time (the front span; with a back span every block),
keeping the streams, the context, the embedded streams and the residuals computed so far. Traced here on fake
tensors like the training step (tracker.py), forward only (no autograd), math attention:

    subject_footprint_bytes (dirty anonymous: what a phone counts)
        = runtime_overhead (assumed, as the step's)
        + persistent: the embedders' frozen weights (0 when mapped), every photo (the runtime decodes them all
          before the first sample and holds them to the end: [3, H, W] fp32 at their normalised size, short side
          at most s_max; `photo_sizes`, else `photos` photos of s_max x s_max), the text conditioning
        + max over the phases of one sample:
            encode  the encoder's weights as XNNPACK holds them (it packs a convolution's weights into its own
                    anonymous memory, mapped data file or not: measured, benchmarks/results/encode_tiles.md; with the
                    portable encoder mapped weights stay file-backed) + the encoder program's peak: the XNNPACK
                    program's planned arena (the tensors between its delegates) + XNNPACK's shared workspace (the
                    largest delegate's NHWC values, the old and the grown one at once) + the convolutions'
                    indirection buffers (xnnpack_program.py; FLUX real width at 256 px: 128 + 160 + 13.5 MiB beside
                    126 MiB of packed weights, benchmarks/results/real_scale.md); the portable encoder: its program's
                    planned arena (every op's buffer placed by ExecuTorch's greedy planner, portable_program_arena;
                    not the eager forward's live peak, which the planner's buckets exceed); on tiles, compile
                    --encode-tile-px: the largest tile's, plus the crop and the latent tiles held for blending
                    (encode_tiles_phase); the encode program is dropped after x0 (runtime/forward.py);
                    staged (compile --encode-stages): the largest over the encoder's stages of that stage's weights +
                    its forward peak + its tiles' features (encode_stages_phase)
            embed   the embed program: its forward peak + its planned copy of its inputs + XNNPACK's workspace
            block   the largest block's frozen weights (0 when mapped: file-backed) + the block program's forward
                    peak + its planned copy of its inputs (the streams entering it, the context) + XNNPACK's
                    workspace + what the runtime holds beside: the streams entering it, the context, the embedded
                    streams and one sample's residuals
          The embed and block programs' peaks are traced as the exported XNNPACK programs run (tracker.py with
          weight_transposes "xnnpack"): each dequantization reads a copy of the int8 codes beside the fp32 weight
          (SANA's layout: the GLUMBConv inverted conv's [5760, 1152] codes, 6.3 MiB, at the block program's peak);
          the workspace is the largest operand a bmm delegate packs (heaptrack of ditskip-run personalize,
          xnn_plan_memory: 5.07 MiB in SANA's block programs).
    forward_flops_per_sample = encoder + embedders + every block the residuals need (forward, no backward)

Cache-free mode (no stored residuals; each training step first computes its samples' residuals with the same
programs while the training program stays loaded):
    storage: the residual cache's bytes are saved (stored mode: samples x entry bytes at the codec)
    footprint: the training step's footprint + the subject stage's per-sample working set (the two run one after
               the other, but the training program's arena lives as long as the program)
    extra FLOPs per optimizer step: grad_accum x forward_flops_per_sample; predicted step time ratio
               (train + forward FLOPs) / train FLOPs
x0-only mode (the cache holds each sample's x0 alone): the cache-free footprint; storage samples x x0's bytes; the
forward without the encoder each step.

Encoders: the models' autoencoders as published with their diffusers checkpoints (FLUX.1-dev: AutoencoderKL, 4
stages 128-512 channels, 16 latent channels; SANA: AutoencoderDC f32c32 with EfficientViT stages), built on the
meta device for the trace; built-in tiny models use their own.
"""

from __future__ import annotations

import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from ..models.loading import build_transformer, vae_class
from ..models.specs import FLUX_ARCH
from ..models.views import _blocks_of, make_view
from ..runtime.cache_format import CacheCodec, entry_layout
from .program import StepConfig, _inputs, _materialize, quantize_direct_layers
from .tracker import StepMemoryTracker, storage_keys
from .xnnpack_program import ProgramOps, portable_program_memory, program_memory_of

# The real-size models' autoencoders as published with their diffusers checkpoints (vae/config.json; no weights
# here): FLUX.1-dev's AutoencoderKL (decoder 49.5M parameters) and SANA's DC-AE f32c32 (decoder 159M parameters).
# The subject stage traces their encoders, generation (generation.py) their decoders (DC-AE's up/downsampling and
# norms at diffusers' defaults).
AUTOENCODER_CONFIGS = {
    "flux-dev": dict(in_channels=3, out_channels=3, latent_channels=16, down_block_types=["DownEncoderBlock2D"] * 4,
                     up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[128, 256, 512, 512],
                     layers_per_block=2, norm_num_groups=32, sample_size=1024, scaling_factor=0.3611,
                     shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False,
                     mid_block_add_attention=True, act_fn="silu"),
    "sana": dict(in_channels=3, latent_channels=32, attention_head_dim=32,
                 encoder_block_types=["ResBlock"] * 3 + ["EfficientViTBlock"] * 3,
                 decoder_block_types=["ResBlock"] * 3 + ["EfficientViTBlock"] * 3,
                 encoder_block_out_channels=[128, 256, 512, 512, 1024, 1024],
                 decoder_block_out_channels=[128, 256, 512, 512, 1024, 1024],
                 encoder_layers_per_block=[2, 2, 2, 3, 3, 3], decoder_layers_per_block=[3, 3, 3, 3, 3, 3],
                 encoder_qkv_multiscales=[[], [], [], [5], [5], [5]],
                 decoder_qkv_multiscales=[[], [], [], [5], [5], [5]], scaling_factor=0.41407),
}


def _encoder_config(spec) -> dict | None:
    if spec.vae_config is not None:
        return None if spec.vae_config.get("kind") == "pixel" else spec.vae_config
    return AUTOENCODER_CONFIGS["flux-dev" if spec.arch == FLUX_ARCH else "sana"]


def _nbytes(tensors) -> int:
    seen, n = set(), 0
    for t in tensors:
        if t is None or t.is_meta:
            continue
        k = t.untyped_storage()._cdata
        if k not in seen:
            seen.add(k)
            n += t.untyped_storage().nbytes()
    return n


def _frozen_bytes(module) -> int:
    return _nbytes([p for _, p in module.named_parameters()] + [b for _, b in module.named_buffers()])


def _trace(fn, preexisting, program: bool = False, beside=None) -> tuple[int, int, int]:
    """(transient peak bytes, FLOPs, XNNPACK workspace bytes) of fn() under no_grad. program: as the exported
    XNNPACK program runs it (the tracker's weight_transposes "xnnpack": the codes' copies, the workspace; graph
    lifetimes, tracker.graph_peak_bytes). beside: another dispatch mode that sees the same ops (one trace)."""
    tracker = StepMemoryTracker(storage_keys(preexisting), weight_transposes="xnnpack" if program else None)
    flops = FlopCounterMode(display=False)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]), flops, tracker, (beside or contextlib.nullcontext()):
        fn()
    peak = tracker.graph_peak_bytes() if program else tracker.peak_bytes
    return peak, int(flops.get_total_flops()), tracker.workspace_bytes


def trace_subject_stage(cfg: StepConfig, forward_precision: str | None = None,
                        photo_sizes: tuple = (), photos: int = 4) -> dict:
    """The subject stage's per-sample working set and FLOPs (module docstring), bytes. photo_sizes: the photos'
    (height, width) as the runtime holds them (normalised: short side at most s_max); without them `photos`
    photos of s_max x s_max."""
    spec = cfg.spec
    precision = forward_precision or cfg.precision
    from ..quantize import QuantSpec
    quant = QuantSpec(precision) if precision in ("int8", "int4") else None
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    plan = cfg.plan
    transformer = build_transformer(spec, "meta")
    blocks = _blocks_of(transformer)
    needed = list(range(plan.num_blocks)) if plan.n_back else list(range(plan.n_front))
    # one representative block per kind (FLUX: double, single; SANA: one), counted as often as it runs
    kinds: dict[str, list[int]] = {}
    for i in needed:
        kinds.setdefault(type(blocks[i]).__name__, []).append(i)
    view = make_view(spec.arch, transformer, [ids[0] for ids in kinds.values()])
    embedders = [m for n, m in view.named_children() if n not in ("blocks", "norm_out", "proj_out")]
    for p in view.parameters():
        p.requires_grad_(False)                     # all frozen: quantize_frozen_layers takes every linear / conv
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    out: dict = {"forward_precision": precision, "blocks_run": len(needed)}
    with fake:
        for i, m in enumerate(embedders + list(view.blocks)):
            _materialize(m, "cpu", dtype, quant, 17 * (i + 1))
        quantize_direct_layers(view, quant)
        embedders = [m for n, m in view.named_children() if n not in ("blocks", "norm_out", "proj_out")]
        for name, p in list(view.named_parameters(recurse=False)):
            setattr(view, name, torch.nn.Parameter(torch.zeros(p.shape, dtype=dtype), requires_grad=False))
        x0, noise, t, cond, _ = _inputs(cfg, "cpu", 1)
        weights = [p for p in view.parameters()] + [b for b in view.buffers()]
        pre = weights + [x0, noise, t, *cond.values()]
        embed_weights = sum(_frozen_bytes(m) for m in embedders)
        state = {}

        def embed():
            x_t = (1 - t.reshape(-1, 1, 1, 1)) * x0 + t.reshape(-1, 1, 1, 1) * noise
            state["streams"], state["ctx"] = view.embed(view.pack(x_t), t, cond)
        embed_peak, embed_flops, embed_workspace = _trace(embed, pre, program=True)
        embed_inputs = _nbytes([x0, noise, t, *cond.values()])     # the embed program's planned input copies
        streams, ctx = state["streams"], state["ctx"]
        ctx_bytes = _nbytes(view.ctx_tensors(ctx).values())
        stream_bytes = _nbytes(streams.values())
        block_rows, block_flops, block_weights_max, block_phase_max = [], 0, 0, 0
        residual_bytes = (stream_bytes if plan.n_front else 0) + (streams["img"].numel() * 4 if plan.n_back else 0)
        held = stream_bytes + ctx_bytes + stream_bytes + residual_bytes   # in, context, embedded, residuals
        block_inputs = stream_bytes + ctx_bytes                          # the block program's planned input copies
        for (kind, ids), block in zip(kinds.items(), view.blocks):
            traced, flops, workspace = _trace(lambda b=block: view.run_block(b, streams, ctx),
                                              pre + list(streams.values()) + list(view.ctx_tensors(ctx).values()),
                                              program=True)
            peak = traced + block_inputs + workspace
            w = _frozen_bytes(block)
            block_rows.append({"kind": kind, "count": len(ids), "frozen_weights_bytes": w,
                               "forward_peak_bytes": peak, "program_traced_peak_bytes": traced,
                               "program_inputs_bytes": block_inputs, "xnnpack_workspace_bytes": workspace,
                               "forward_flops": flops})
            block_flops += flops * len(ids)
            block_weights_max = max(block_weights_max, w)
            block_phase_max = max(block_phase_max, peak + held, w + peak + held)
    enc_weights, enc_peak, enc_flops, enc_program = _trace_encoder(spec, cfg.resolution_px)
    sizes = list(photo_sizes) or [(spec.data_px, spec.data_px)] * photos
    photo_bytes = sum(3 * h * w * 4 for h, w in sizes)
    text_bytes = _nbytes(cond.values())
    out.update(block_kinds=block_rows, largest_block_weights_bytes=block_weights_max,
               embed_weights_bytes=embed_weights, embed_forward_peak_bytes=embed_peak,
               embed_program_inputs_bytes=embed_inputs, embed_xnnpack_workspace_bytes=embed_workspace,
               photos=len(sizes),
               encoder_weights_bytes=enc_weights, encoder_forward_peak_bytes=enc_peak,
               encoder_xnnpack_program=enc_program,
               streams_bytes=stream_bytes, context_bytes=ctx_bytes, residuals_bytes=residual_bytes,
               photo_bytes=photo_bytes, text_conditioning_bytes=text_bytes,
               forward_flops_per_sample=enc_flops + embed_flops + block_flops, encoder_flops_per_sample=enc_flops)
    # phases (the block phase with resident or mapped block weights)
    block_phase_mapped = max(r["forward_peak_bytes"] for r in block_rows) + held
    out["phase_peaks_bytes"] = {"encode": enc_peak, "embed": embed_peak + embed_inputs + embed_workspace,
                                "block_resident": block_phase_max,
                                "block_mapped": block_phase_mapped}
    return out


def portable_program_arena(fn, weights: list[torch.Tensor], inputs: list[torch.Tensor]) -> int:
    """The planned arena of fn()'s all-portable inference program (export/executorch_subject.py export_forward,
    backend portable: the weights external constants, read in place; the inputs planned):
    xnnpack_program.portable_program_memory's greedy plan of every op's buffer. Call inside FakeTensorMode."""
    return int(portable_program_memory(fn, weights, inputs)["arena_bytes"])


def _portable_encoder_arena(spec, height_px: int, width_px: int) -> int:
    """portable_program_arena of the encode program (LatentEncoder: the encoder, the posterior's mode, shift and
    scaling) on one crop of height_px x width_px (meta weights, fake tensors)."""
    from ..models.latents import LatentEncoder
    cfg = _encoder_config(spec)
    if cfg is None:
        return 3 * height_px * width_px * 4
    with torch.device("meta"):
        vae = vae_class(spec.arch).from_config(cfg).eval()
    with FakeTensorMode(allow_non_fake_inputs=True):
        vae.to_empty(device="cpu")
        enc = LatentEncoder(spec.arch, vae)
        patch = torch.zeros(1, 3, height_px, width_px)
        weights = list(vae.encoder.parameters()) + list(vae.encoder.buffers())
        return portable_program_arena(lambda: enc(patch), weights, [patch])


def _trace_encoder(spec, height_px: int, width_px: int | None = None) -> tuple[int, int, int, dict]:
    """(frozen weights bytes, forward transient peak, FLOPs, its XNNPACK program's memory: xnnpack_program.py) of
    the autoencoder's encoder on one crop of height_px x width_px (square without width_px)."""
    width_px = width_px or height_px
    cfg = _encoder_config(spec)
    if cfg is None:                   # pixel space: a weightless space-to-depth
        n = 3 * height_px * width_px * 4
        return 0, n, 0, {"arena_bytes": n, "workspace_bytes": 0, "workspace_peak_bytes": 0, "indirection_bytes": 0,
                         "peak_bytes": n, "delegates": 0, "workspaces_bytes": []}
    with torch.device("meta"):
        vae = vae_class(spec.arch).from_config(cfg).eval()
    enc = vae.encoder
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake:
        enc.to_empty(device="cpu")
        patch = torch.zeros(1, 3, height_px, width_px)
        w = _frozen_bytes(enc)
        weights = list(enc.parameters()) + list(enc.buffers())
        rec, out = ProgramOps(weights), {}
        peak, flops, _ = _trace(lambda: out.setdefault("y", enc(patch)), weights + [patch], beside=rec)
        program = program_memory_of(rec, weights, [patch], out["y"])
    return w, peak, flops, program


def photo_sizes_of(folder, data_px: int) -> list[tuple[int, int]]:
    """The (height, width) the subject stage holds each photo of `folder` at (runtime/photos.py load_photos: upright
    by its EXIF orientation, short side resized to data_px when larger), read from the files' headers."""
    from PIL import Image

    from ..runtime.photos import photo_files
    sizes = []
    for f in photo_files(folder):
        with Image.open(f) as im:
            w, h = im.size
            if im.getexif().get(0x0112) in (5, 6, 7, 8):        # a quarter turn: exif_transpose swaps the sides
                w, h = h, w
        short = min(w, h)
        if short > data_px:
            w, h = max(data_px, round(w * data_px / short)), max(data_px, round(h * data_px / short))
        sizes.append((h, w))
    return sizes


SUGGESTED_TILE_PX = 256          # the tile the estimate suggests when the encoder dominates (DC-AE on a phone)


def encode_tiles_phase(cfg: StepConfig, tile_px: int) -> dict | None:
    """The encoder on pixel tiles (compile --encode-tile-px; runtime/tiling.py encode_tiled as the device runs it):
    the encode phase = the largest tile's encode program + what is held beside it: the s_min crop, every tile's
    latent (the device runs all tiles of one shape in a row, then blends, as diffusers does) and x0 (`phase_bytes`:
    the portable program's planned arena, portable_program_arena; the XNNPACK encoder: the largest tile's program
    peak in its place, `xnnpack_phase_bytes`). None when the crop is one tile or there is no encoder."""
    from ..models.latents import encode_tiling
    tiling = encode_tiling(cfg.spec, cfg.resolution_px, tile_px)
    if not tiling["tiled"] or _encoder_config(cfg.spec) is None:
        return None
    from ..runtime.tiling import tile_shapes, tile_sizes
    f, s = cfg.spec.vae_scale_factor, cfg.resolution_px
    channels = int(_encoder_config(cfg.spec).get("latent_channels", 0))
    sizes = tile_sizes(s, tiling["tile_px"], tiling["stride_px"])
    shapes = tile_shapes((s, s), tiling["tile_px"], tiling["stride_px"])
    portable_arena, program_peak, flops = 0, 0, 0
    for th, tw in shapes:
        _, _, f_tile, program = _trace_encoder(cfg.spec, th, tw)
        portable_arena = max(portable_arena, _portable_encoder_arena(cfg.spec, th, tw))
        program_peak = max(program_peak, program["peak_bytes"])
        flops += f_tile * sum(1 for a in sizes for b in sizes if (a, b) == (th, tw))
    tiles_latent = sum(channels * (th // f) * (tw // f) * 4 for th in sizes for tw in sizes)
    held = 3 * s * s * 4 + tiles_latent + channels * (s // f) ** 2 * 4
    return {**tiling, "tile_shapes": [list(t) for t in shapes],
            "tiles": len(sizes) ** 2, "encoder_tile_portable_arena_bytes": portable_arena, "held_bytes": held,
            "phase_bytes": portable_arena + held, "encoder_tile_xnnpack_program_peak_bytes": program_peak,
            "xnnpack_phase_bytes": program_peak + held, "encoder_flops_per_sample": flops}


def encode_stages_phase(cfg: StepConfig, tile_px: int | None, anonymous_weights: bool,
                        xnnpack: bool = False) -> dict | None:
    """The encoder as one program per stage (compile --encode-stages; models/latents.py encoder_stages), run as
    runtime/forward.py encode_shape does: per pixel tile shape, each stage's program on every tile of that shape
    before the next stage loads. Stage k's phase = its weights (anonymous_weights: XNNPACK's packed copy or resident
    weights; 0 for the portable encoder's mapped weights) + its program on the largest tile (the portable program's
    planned arena, portable_program_arena; xnnpack: its XNNPACK program's peak, xnnpack_program.py) + every tile of that shape's features in and out (+ the
    runner's copy of one tile's output) + what the tiles hold beside (the crop, the latent tiles, x0: encode_tiles_phase). None without an encoder."""
    from ..models.latents import encode_tiling, encoder_stages
    from ..runtime.tiling import tile_shapes, tile_sizes
    enc_cfg = _encoder_config(cfg.spec)
    if enc_cfg is None:
        return None
    s, f = cfg.resolution_px, cfg.spec.vae_scale_factor
    tiling = encode_tiling(cfg.spec, s, tile_px)
    sizes = tile_sizes(s, tiling["tile_px"], tiling["stride_px"])
    shapes = tile_shapes((s, s), tiling["tile_px"], tiling["stride_px"])
    counts = {hw: sum(1 for a in sizes for b in sizes if (a, b) == hw) for hw in shapes}
    channels = int(enc_cfg.get("latent_channels", 0))
    tiles_latent = sum(channels * (th // f) * (tw // f) * 4 for th in sizes for tw in sizes) if tiling["tiled"] else 0
    held = 3 * s * s * 4 + tiles_latent + channels * (s // f) ** 2 * 4
    with torch.device("meta"):
        vae = vae_class(cfg.spec.arch).from_config(enc_cfg).eval()
    rows: list[dict] = []
    with FakeTensorMode(allow_non_fake_inputs=True):
        vae.to_empty(device="cpu")
        stages = encoder_stages(cfg.spec.arch, vae)
        for k, stage in enumerate(stages):
            w = _frozen_bytes(stage)
            rows.append({"stage": k, "weights_bytes": w, "portable_arena_bytes": 0, "xnnpack_program_peak_bytes": 0,
                         "features_held_bytes": 0})
        for hw in shapes:
            x = torch.zeros(1, 3, *hw)
            for k, stage in enumerate(stages):
                out = {}
                weights = list(stage.parameters()) + list(stage.buffers())
                if xnnpack:
                    rec = ProgramOps(weights)
                    _trace(lambda st=stage, xx=x: out.setdefault("y", st(xx)), weights + [x], beside=rec)
                    program = program_memory_of(rec, weights, [x], out["y"])
                else:
                    arena = portable_program_arena(lambda st=stage, xx=x: out.setdefault("y", st(xx)), weights, [x])
                y = out["y"]
                # every tile of the shape: its input features and (as they are computed) its output features, and
                # the runner's copy of the program's output (ProgramRunner::run; heaptrack, SANA-1600M stage 0)
                feats = counts[hw] * (x.numel() + y.numel()) * 4 + y.numel() * 4
                r = rows[k]
                if xnnpack:
                    r["xnnpack_program_peak_bytes"] = max(r["xnnpack_program_peak_bytes"], program["peak_bytes"])
                else:
                    r["portable_arena_bytes"] = max(r["portable_arena_bytes"], arena)
                r["features_held_bytes"] = max(r["features_held_bytes"], feats)
                x = y
    for r in rows:
        r["phase_bytes"] = ((r["weights_bytes"] if anonymous_weights else 0)
                            + r["xnnpack_program_peak_bytes" if xnnpack else "portable_arena_bytes"]
                            + r["features_held_bytes"] + held)
    largest = max(rows, key=lambda r: r["phase_bytes"])
    return {**tiling, "stages": len(rows), "stage_rows": rows, "held_bytes": held,
            "largest_stage": largest["stage"], "phase_bytes": largest["phase_bytes"],
            "largest_stage_weights_bytes": max(r["weights_bytes"] for r in rows)}


def subject_stage_estimate(cfg: StepConfig, train_memory: dict, train_flops: int, runtime_overhead_bytes: int,
                           num_samples: int, grad_accum: int, codec: str, weights: str = "resident",
                           forward_precision: str | None = None, encode_tile_px: int | None = None,
                           encode_backend: str = "xnnpack", encode_stages: bool = False, photo_sizes: tuple = (),
                           photos: int = 4) -> dict:
    """The estimate's `subject_stage`, `cache_free` and `x0_only` sections (bytes; see the module docstring).
    encode_tile_px: the encoder on tiles (its phase from encode_tiles_phase); encode_stages: one stage's program at a
    time (encode_stages_phase). When the encoder's phase is the largest and the stage is above training,
    `encode_tiles_suggested` names the first of: SUGGESTED_TILE_PX tiles, + the staged encoder, + the portable encoder
    (its mapped weights read in place) that brings the stage under training (else the leanest), and what it gives."""
    tr = trace_subject_stage(cfg, forward_precision, photo_sizes, photos)
    mapped = weights == "mapped"
    persistent = (0 if mapped else tr["embed_weights_bytes"]) + tr["photo_bytes"] + tr["text_conditioning_bytes"]
    xnn = encode_backend == "xnnpack"
    traced: dict[tuple, dict | None] = {}

    def once(phase_fn, *args) -> dict | None:
        """encode_tiles_phase / encode_stages_phase traced once per estimate (the suggestion loop asks again)"""
        key = (phase_fn.__name__, *args)
        if key not in traced:
            traced[key] = phase_fn(cfg, *args)
        return traced[key]

    def encode_phase(tile_px, staged, xnnpack) -> tuple[int, int, dict | None, dict | None]:
        """(phase bytes, anonymous encoder weight bytes in it, tiles detail, stages detail); xnnpack: the XNNPACK
        encoder (its packed weights anonymous, its program's arena + workspace + indirection as the peak), else the
        portable one (weights anonymous only when resident, its program's planned arena)"""
        anon = xnnpack or not mapped
        tiles = once(encode_tiles_phase, tile_px) if tile_px is not None else None
        if staged:
            st = once(encode_stages_phase, tile_px, anon, xnnpack)
            if st is not None:
                return st["phase_bytes"], st["largest_stage_weights_bytes"] if anon else 0, tiles, st
        w = tr["encoder_weights_bytes"] if anon else 0
        if tiles:
            return w + tiles["xnnpack_phase_bytes" if xnnpack else "phase_bytes"], w, tiles, None
        peak = tr["encoder_xnnpack_program"]["peak_bytes"] if xnnpack else \
            _portable_encoder_arena(cfg.spec, cfg.resolution_px, cfg.resolution_px)
        return w + peak, w, tiles, None

    phases = dict(tr["phase_peaks_bytes"])
    phases["encode"], encoder_anon, tiles, stages = encode_phase(encode_tile_px, encode_stages, xnn)
    if tiles is not None:
        tr = {**tr, "forward_flops_per_sample": tr["forward_flops_per_sample"] - tr["encoder_flops_per_sample"]
              + tiles["encoder_flops_per_sample"], "encoder_flops_per_sample": tiles["encoder_flops_per_sample"]}
    block_phase = phases["block_mapped" if mapped else "block_resident"]
    others = max(phases["embed"], block_phase)
    footprint = runtime_overhead_bytes + persistent + max(phases["encode"], others)
    train_fp = int(train_memory["footprint_bytes"])
    suggested = None
    if phases["encode"] > others and footprint > train_fp:
        # the encoder dominates and the stage is above training: tiles, then one stage at a time, then the portable
        # encoder (mapped weights read in place, about 20x slower), the first that fits (else the leanest)
        tile = encode_tile_px or SUGGESTED_TILE_PX
        tiles_ok = once(encode_tiles_phase, tile) is not None
        options = [(tile if tiles_ok else None, encode_stages, xnn),
                   (tile if tiles_ok else None, True, xnn)]
        if mapped and xnn:
            options.append((tile if tiles_ok else None, encode_stages, False))
        tried = []
        for tile_px, staged, backend_xnn in options:
            flags = ([f"--encode-tile-px {tile_px}"] if tile_px is not None else []) + \
                    (["--encode-stages"] if staged else []) + ([] if backend_xnn == xnn else
                                                               ["--encode-backend portable"])
            if (tile_px, staged, backend_xnn) == (encode_tile_px, encode_stages, xnn) or not flags:
                continue
            phase, anon_bytes, _, _ = encode_phase(tile_px, staged, backend_xnn)
            fp = runtime_overhead_bytes + persistent + max(phase, others)
            tried.append((fp > train_fp, fp, flags, phase))
            if fp <= train_fp:
                break
        if tried:
            _, fp, flags, phase = next((t for t in tried if not t[0]), min(tried, key=lambda t: t[1]))
            suggested = {"flag": " ".join(flags), "footprint_bytes": fp, "footprint_gib": round(fp / 2 ** 30, 3),
                         "encode_phase_bytes": phase}
            if "--encode-stages" in flags:
                suggested["note"] = ("compile runs each stage program once against the encoder and refuses the "
                                     "bundle when one does not reproduce it; then --encode-backend portable")
    shapes = _entry_shapes(cfg)
    _, entry_bytes = entry_layout(CacheCodec.parse(codec), shapes)
    _, x0_bytes = entry_layout(CacheCodec.parse(codec), {"x0": shapes["x0"]})
    fwd = tr["forward_flops_per_sample"]
    return {
        "subject_stage": {**tr, "phase_peaks_bytes": phases, "weights": weights, "encode_backend": encode_backend,
                          "encoder_anonymous_weights_bytes": encoder_anon, "footprint_bytes": footprint,
                          "footprint_gib": round(footprint / 2 ** 30, 3),
                          "training_footprint_bytes": train_fp,
                          "no_larger_than_training": footprint <= train_fp,
                          "file_backed_working_set_bytes": (tr["largest_block_weights_bytes"]
                                                            + tr["encoder_weights_bytes"] - encoder_anon
                                                            + tr["embed_weights_bytes"]) if mapped else 0,
                          "tflops_per_sample": round(fwd / 1e12, 4),
                          "encode_tiles": tiles, "encode_stages": stages, "encode_tiles_suggested": suggested},
        "cache_free": {"codec": codec, "entry_bytes": entry_bytes, "stored_cache_bytes": entry_bytes * num_samples,
                       "stored_cache_gib": round(entry_bytes * num_samples / 2 ** 30, 3),
                       "cache_free_storage_saved_bytes": entry_bytes * num_samples,
                       "footprint_bytes": train_fp + footprint - runtime_overhead_bytes,
                       "footprint_gib": round((train_fp + footprint - runtime_overhead_bytes) / 2 ** 30, 3),
                       "footprint_over_training_bytes": footprint - runtime_overhead_bytes,
                       "extra_flops_per_step": grad_accum * fwd,
                       "extra_tflops_per_step": round(grad_accum * fwd / 1e12, 4),
                       "predicted_step_time_ratio": round((train_flops + fwd) / max(train_flops, 1), 3)},
        # x0-only: the cache holds x0 alone; each step runs the forward without the encoder (same footprint)
        "x0_only": {"entry_bytes": x0_bytes, "stored_cache_bytes": x0_bytes * num_samples,
                    "stored_cache_gib": round(x0_bytes * num_samples / 2 ** 30, 3),
                    "extra_flops_per_step": grad_accum * (fwd - tr["encoder_flops_per_sample"]),
                    "predicted_step_time_ratio": round((train_flops + fwd - tr["encoder_flops_per_sample"])
                                                       / max(train_flops, 1), 3)},
    }


def _entry_shapes(cfg: StepConfig) -> dict[str, tuple[int, ...]]:
    n, L, D = cfg.image_tokens, cfg.text_tokens, cfg.hidden_dim
    shapes: dict[str, tuple[int, ...]] = {"x0": cfg.latent_shape()}
    if cfg.n_front:
        shapes["front.img"] = (1, n, D)
        if cfg.spec.arch == FLUX_ARCH:
            shapes["front.txt"] = (1, L, D)
    if cfg.n_back:
        shapes["back.img"] = (1, n, D)
    return shapes

