"""One view of a diffusers DiT: embed -> ordered blocks -> head.

A view is an nn.Module that *references* the transformer's modules (no copies). It holds the embedders, the head
and the blocks it was built for, so a view over the kept blocks contains no skipped weight (what gets exported),
and a view over all blocks is the full model.

Streams are the hidden states that flow from block to block, by name:
- FLUX: "img" [B, N_img, D] and "txt" [B, N_txt, D]. Double-stream blocks update both; single-stream blocks join
  them inside (cat([txt, img])) and split them again on return, so both streams exist at every block boundary.
- SANA: "img" [B, N_img, D]; the text enters every block through cross-attention as context, not as a stream.
The head reads "img" only.

Model input ("latent tokens"): FLUX takes packed latents [B, N_img, 4*C] (2x2 patches), SANA latents [B, C, h, w].
`pack` / `unpack` convert from / to autoencoder latents [B, C, h, w].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn as nn

from .specs import FLUX_ARCH, SANA_ARCH

Streams = dict[str, torch.Tensor]
Conditioning = dict[str, torch.Tensor]


def block_names_of(transformer: nn.Module) -> list[str]:
    """Full-model module names of the blocks, in execution order."""
    if hasattr(transformer, "single_transformer_blocks"):
        return ([f"transformer_blocks.{i}" for i in range(len(transformer.transformer_blocks))]
                + [f"single_transformer_blocks.{i}" for i in range(len(transformer.single_transformer_blocks))])
    return [f"transformer_blocks.{i}" for i in range(len(transformer.transformer_blocks))]


def _blocks_of(transformer: nn.Module) -> list[nn.Module]:
    blocks = list(transformer.transformer_blocks)
    if hasattr(transformer, "single_transformer_blocks"):
        blocks += list(transformer.single_transformer_blocks)
    return blocks


class DiTView(nn.Module):
    arch: str
    stream_names: tuple[str, ...]
    head_stream = "img"

    def __init__(self, transformer: nn.Module, block_indices: Sequence[int] | None = None):
        super().__init__()
        all_blocks = _blocks_of(transformer)
        names = block_names_of(transformer)
        idx = list(range(len(all_blocks))) if block_indices is None else list(block_indices)
        self.num_blocks_total = len(all_blocks)
        self.block_indices = idx
        self.block_names = [names[i] for i in idx]
        self.blocks = nn.ModuleList([all_blocks[i] for i in idx])
        self.config = dict(transformer.config)

    # interface ---------------------------------------------------------------------------------------------
    def pack(self, latents: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def unpack(self, tokens: torch.Tensor, latent_hw: tuple[int, int]) -> torch.Tensor:
        raise NotImplementedError

    def embed(self, x_t: torch.Tensor, t: torch.Tensor, cond: Conditioning) -> tuple[Streams, "object"]:
        """x_t: model input; t [B] in [0, 1] (rectified-flow time, 1 = noise). Returns the streams entering block 0
        and the context every block and the head read."""
        raise NotImplementedError

    def run_block(self, block: nn.Module, streams: Streams, ctx) -> Streams:
        raise NotImplementedError

    def run_blocks(self, blocks, streams: Streams, ctx) -> Streams:
        """The given blocks in order (the memory estimate wraps this to model block rematerialization)."""
        for block in blocks:
            streams = self.run_block(block, streams, ctx)
        return streams

    def head(self, streams: Streams, ctx) -> torch.Tensor:
        """Prediction (velocity, model-input layout) from the streams leaving the last block."""
        raise NotImplementedError

    # shared ------------------------------------------------------------------------------------------------
    def forward(self, x_t: torch.Tensor, t: torch.Tensor, cond: Conditioning) -> torch.Tensor:
        streams, ctx = self.embed(x_t, t, cond)
        streams = self.run_blocks(self.blocks, streams, ctx)
        return self.head(streams, ctx)


@dataclass
class FluxContext:
    temb: torch.Tensor                              # [B, D]
    rotary: tuple[torch.Tensor, torch.Tensor]       # (cos, sin) [N_txt + N_img, head_dim]


class FluxView(DiTView):
    arch = FLUX_ARCH
    stream_names = ("img", "txt")

    def __init__(self, transformer: nn.Module, block_indices: Sequence[int] | None = None):
        super().__init__(transformer, block_indices)
        self.x_embedder = transformer.x_embedder
        self.time_text_embed = transformer.time_text_embed
        self.context_embedder = transformer.context_embedder
        self.pos_embed = transformer.pos_embed
        self.norm_out = transformer.norm_out
        self.proj_out = transformer.proj_out
        self.guidance_embeds = bool(self.config.get("guidance_embeds", False))

    def pack(self, latents: torch.Tensor) -> torch.Tensor:
        b, c, h, w = latents.shape
        x = latents.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, (h // 2) * (w // 2), c * 4)

    def unpack(self, tokens: torch.Tensor, latent_hw: tuple[int, int]) -> torch.Tensor:
        b, _, ch = tokens.shape
        h, w = latent_hw
        x = tokens.reshape(b, h // 2, w // 2, ch // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
        return x.reshape(b, ch // 4, h, w)

    @staticmethod
    def image_ids(n_img: int, dtype=torch.float32) -> torch.Tensor:
        side = int(round(int(n_img) ** 0.5))     # int(): a traced shape is a tensor (ONNX exporter)
        ids = torch.zeros(side, side, 3, dtype=dtype)
        ids[..., 1] = torch.arange(side, dtype=dtype)[:, None]
        ids[..., 2] = torch.arange(side, dtype=dtype)[None, :]
        return ids.reshape(side * side, 3)

    def embed(self, x_t, t, cond):
        img = self.x_embedder(x_t)
        timestep = t.to(img.dtype) * 1000
        if self.guidance_embeds:
            temb = self.time_text_embed(timestep, cond["guidance"].to(img.dtype) * 1000, cond["pooled"])
        else:
            temb = self.time_text_embed(timestep, cond["pooled"])
        txt = self.context_embedder(cond["txt"])
        ids = torch.cat([torch.zeros(txt.shape[1], 3, dtype=img.dtype), self.image_ids(img.shape[1], img.dtype)], 0)
        rotary = self.pos_embed(ids)
        return {"img": img, "txt": txt}, FluxContext(temb=temb, rotary=rotary)

    def run_block(self, block, streams, ctx: FluxContext):
        txt, img = block(hidden_states=streams["img"], encoder_hidden_states=streams["txt"], temb=ctx.temb,
                         image_rotary_emb=ctx.rotary)
        return {"img": img, "txt": txt}

    def head(self, streams, ctx: FluxContext):
        return self.proj_out(self.norm_out(streams["img"], ctx.temb))


@dataclass
class SanaContext:
    timestep: torch.Tensor            # [B, 6 D] AdaLN modulation for every block
    embedded_timestep: torch.Tensor   # [B, D] for the final modulated norm
    txt: torch.Tensor                 # [B, L, D] projected caption
    txt_bias: torch.Tensor | None     # [B, 1, L] additive attention bias from the caption mask
    hw: tuple[int, int]               # latent grid after patching


class SanaView(DiTView):
    arch = SANA_ARCH
    stream_names = ("img",)

    def __init__(self, transformer: nn.Module, block_indices: Sequence[int] | None = None):
        super().__init__(transformer, block_indices)
        self.patch_embed = transformer.patch_embed
        self.time_embed = transformer.time_embed
        self.caption_projection = transformer.caption_projection
        self.caption_norm = transformer.caption_norm
        self.norm_out = transformer.norm_out
        self.proj_out = transformer.proj_out
        self.scale_shift_table = transformer.scale_shift_table
        self.patch = int(self.config.get("patch_size", 1))

    def pack(self, latents):
        return latents

    def unpack(self, tokens, latent_hw):
        return tokens

    def embed(self, x_t, t, cond):
        b, _, h, w = x_t.shape
        img = self.patch_embed(x_t)
        timestep, embedded = self.time_embed(t * 1000, batch_size=b, hidden_dtype=img.dtype)
        txt = self.caption_norm(self.caption_projection(cond["txt"]).view(b, -1, img.shape[-1]))
        bias = None
        if "txt_mask" in cond:
            bias = ((1 - cond["txt_mask"].to(img.dtype)) * -10000.0).unsqueeze(1)
        ctx = SanaContext(timestep=timestep, embedded_timestep=embedded, txt=txt, txt_bias=bias,
                          hw=(h // self.patch, w // self.patch))
        return {"img": img}, ctx

    def run_block(self, block, streams, ctx: SanaContext):
        return {"img": block(streams["img"], None, ctx.txt, ctx.txt_bias, ctx.timestep, ctx.hw[0], ctx.hw[1])}

    def head(self, streams, ctx: SanaContext):
        x = self.proj_out(self.norm_out(streams["img"], ctx.embedded_timestep, self.scale_shift_table))
        b = x.shape[0]
        h, w = ctx.hw
        p = self.patch
        x = x.reshape(b, h, w, p, p, -1).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, -1, h * p, w * p)


def make_view(arch: str, transformer: nn.Module, block_indices: Sequence[int] | None = None) -> DiTView:
    return {FLUX_ARCH: FluxView, SANA_ARCH: SanaView}[arch](transformer, block_indices)


def full_model_forward(arch: str, transformer: nn.Module, x_t: torch.Tensor, t: torch.Tensor,
                       cond: Conditioning) -> torch.Tensor:
    """The diffusers model's own forward, for checking views against it."""
    if arch == FLUX_ARCH:
        n_img = x_t.shape[1]
        kw = {}
        if transformer.config.get("guidance_embeds", False):
            kw["guidance"] = cond["guidance"]
        return transformer(hidden_states=x_t, encoder_hidden_states=cond["txt"], pooled_projections=cond["pooled"],
                           timestep=t, img_ids=FluxView.image_ids(n_img, x_t.dtype),
                           txt_ids=torch.zeros(cond["txt"].shape[1], 3, dtype=x_t.dtype), return_dict=False, **kw)[0]
    return transformer(hidden_states=x_t, encoder_hidden_states=cond["txt"], timestep=t * 1000,
                       encoder_attention_mask=cond.get("txt_mask"), return_dict=False)[0]
