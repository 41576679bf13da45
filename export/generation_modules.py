"""The exportable modules of generation: the full transformer's forward cut at block boundaries, the text encoder
and the autoencoder's decoder. Each takes and returns flat tensors with fixed names, so the device runtime (and the
apps) call them with one generic rule: a program's inputs are looked up by name among the values computed so far
(`w.<state>` among the block's weights), its outputs are stored under their names.

    gen_embed(x [B, C, h, w], t [B], cond.<key> sorted)  -> the streams entering block 0 and the context
    gen_block.<kind>(streams, context, w.<state> ...)    -> the streams leaving the block
    gen_head(img, context)                               -> v [B, C, h, w]   (velocity, latent layout)
    decode.<h>x<w>(x [1, C, h, w], w.<state> ...)         -> image [1, 3, h f, w f] in about [-1, 1] (one latent
                                                           tile; runtime/tiling.py puts the picture together)
    text_encoder(input_ids, attention_mask)              -> cond.txt, cond.pooled   (flux-testbed's MiniLM)

with, by architecture (models/views.py: the diffusers modules themselves, referenced, never re-implemented):

    FLUX  embed -> img [B, N, D], txt [B, L, D], temb [B, D], rot_cos / rot_sin [L + N, head_dim]
          block.double / block.single (img, txt, temb, rot_cos, rot_sin) -> img, txt;  head (img, temb)
    SANA  embed -> img [B, N, D], timestep [B, 6D], embedded_timestep [B, D], caption [B, L, D],
                   caption_bias [B, 1, L];  block.sana (img, timestep, caption, caption_bias) -> img;
          head (img, embedded_timestep)

The latents stay in the autoencoder's layout [B, C, h, w] between programs (FLUX packs 2x2 patches inside embed and
unpacks inside head), so the runtime's Euler update is elementwise on one layout and the decoder reads it as is.

A block program holds no weights: `LiftedBlock` makes every parameter and buffer of the block an input
(torch.func.functional_call), so one program serves every block of its kind and the runtime feeds each block's
weights from the memory-mapped weights file (runtime/weights.py). `lift_states` is the shared piece; a per-block
program with its frozen weights as constants (or in an ExecuTorch .ptd data file) is the same export with
`lifted=()`.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from ditskip_edge.models.latents import LatentEncoder
from ditskip_edge.models.specs import FLUX_ARCH
from ditskip_edge.models.views import DiTView, FluxContext, SanaContext
from ditskip_edge.runtime.contract import COND_PREFIX

WEIGHT_PREFIX = "w."
ACTIVATIONS = {
    FLUX_ARCH: {"embed": ["img", "txt", "temb", "rot_cos", "rot_sin"],
                "block": ["img", "txt", "temb", "rot_cos", "rot_sin"], "block_out": ["img", "txt"],
                "head": ["img", "temb"]},
    "sana": {"embed": ["img", "timestep", "embedded_timestep", "caption", "caption_bias"],
             "block": ["img", "timestep", "caption", "caption_bias"], "block_out": ["img"],
             "head": ["img", "embedded_timestep"]},
}


def _contiguous(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Outputs in the standard (row-major) dim order: what the runtime's numpy arrays have when they come back in."""
    return tuple(t.contiguous() for t in tensors)


def block_kind(arch: str, block_name: str) -> str:
    if arch == FLUX_ARCH:
        return "single" if block_name.startswith("single_transformer_blocks.") else "double"
    return "sana"


def block_states(block: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of a block by its name inside the block (what a block program takes)."""
    return {**dict(block.named_parameters()), **{n: b for n, b in block.named_buffers() if b is not None}}


class GenEmbed(nn.Module):
    def __init__(self, view: DiTView, cond_keys: list[str]):
        super().__init__()
        self.view, self.cond_keys = view, sorted(cond_keys)

    def input_names(self) -> list[str]:
        return ["x", "t"] + [COND_PREFIX + k for k in self.cond_keys]

    def forward(self, x, t, *cond):
        streams, ctx = self.view.embed(self.view.pack(x), t, dict(zip(self.cond_keys, cond)))
        if isinstance(ctx, FluxContext):
            return _contiguous(streams["img"], streams["txt"], ctx.temb, ctx.rotary[0], ctx.rotary[1])
        return _contiguous(streams["img"], ctx.timestep, ctx.embedded_timestep, ctx.txt, ctx.txt_bias)


class LiftedBlock(nn.Module):
    """One block's forward with the states named in `lifted` taken as inputs (after the activations)."""

    def __init__(self, view: DiTView, block: nn.Module, latent_hw: tuple[int, int], lifted: list[str]):
        super().__init__()
        self.view, self.block, self.hw = view, block, latent_hw
        self.acts = ACTIVATIONS[view.arch]["block"]
        self.lifted = list(lifted)

    def input_names(self) -> list[str]:
        return self.acts + [WEIGHT_PREFIX + n for n in self.lifted]

    def forward(self, *tensors):
        k = len(self.acts)
        a = dict(zip(self.acts, tensors[:k]))
        ws = dict(zip(self.lifted, tensors[k:]))
        if self.view.arch == FLUX_ARCH:
            txt, img = functional_call(self.block, ws, (), dict(
                hidden_states=a["img"], encoder_hidden_states=a["txt"], temb=a["temb"],
                image_rotary_emb=(a["rot_cos"], a["rot_sin"])), strict=False)
            return _contiguous(img, txt)
        p = self.view.patch
        h, w = self.hw[0] // p, self.hw[1] // p
        return _contiguous(functional_call(self.block, ws, (a["img"], None, a["caption"], a["caption_bias"],
                                                            a["timestep"], h, w), strict=False))


class GenHead(nn.Module):
    def __init__(self, view: DiTView, latent_hw: tuple[int, int]):
        super().__init__()
        self.view, self.hw = view, latent_hw

    def forward(self, img, ctx_tensor):
        if self.view.arch == FLUX_ARCH:
            v = self.view.head({"img": img}, FluxContext(temb=ctx_tensor, rotary=None))
            return self.view.unpack(v, self.hw).contiguous()
        p = self.view.patch
        ctx = SanaContext(timestep=None, embedded_timestep=ctx_tensor, txt=None, txt_bias=None,
                          hw=(self.hw[0] // p, self.hw[1] // p))
        return self.view.head({"img": img}, ctx).contiguous()


class PlainDecode(nn.Module):
    """Latents [1, C, h, w] -> image [1, 3, H, W]: the pipelines' decode (unscale, unshift, the VAE's decoder)."""

    def __init__(self, encoder: LatentEncoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, x):
        return self.encoder.decode(x).contiguous()


def decoder_states(decode: PlainDecode, example: torch.Tensor) -> dict[str, torch.Tensor]:
    """The parameters and buffers decode reads (the decoder's; not the encoder's), by name inside `decode`."""
    with torch.no_grad():
        ep = torch.export.export(decode.eval(), (example,), strict=False)
    read = {n.name for n in ep.graph.nodes if n.op == "placeholder" and n.users}
    targets = {**ep.graph_signature.inputs_to_parameters, **ep.graph_signature.inputs_to_buffers}
    used = {t for node, t in targets.items() if node in read}   # export lifts every state; decode reads the decoder
    return {n: t for n, t in {**dict(decode.named_parameters()), **dict(decode.named_buffers())}.items() if n in used}


class Decode(nn.Module):
    """PlainDecode with its weights as inputs after x (`w.<state>`, from the mapped decoder weights file): one
    program per latent tile shape, no copy of the weights in any of them."""

    def __init__(self, plain: PlainDecode, lifted: list[str]):
        super().__init__()
        self.plain, self.lifted = plain, list(lifted)

    def input_names(self) -> list[str]:
        return ["x"] + [WEIGHT_PREFIX + n for n in self.lifted]

    def forward(self, x, *ws):
        return functional_call(self.plain, dict(zip(self.lifted, ws)), (x,), strict=False).contiguous()


class MiniLMEncoder(nn.Module):
    """flux-testbed's text conditioning as models/text.py MiniLMTextEncoder computes it (docs/optimum.md recipe):
    (input_ids, attention_mask) int64 [1, L] -> txt [1, L, 384] (padding zeroed), pooled [1, 384] (mean, L2-normed)."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.to(hidden.dtype)
        txt = hidden * m[..., None]
        return txt, F.normalize(txt.sum(1) / m.sum(1, keepdim=True), dim=-1)


class PipelineEncoder(nn.Module):
    """One real text encoder of a diffusers pipeline folder, as its pipeline calls it (fp32, batch 1):

        clip   input_ids [1, 77]                 -> cond.pooled [1, P]   FluxPipeline._get_clip_prompt_embeds: the
                                                                         CLIPTextModel's pooler_output (hidden state
                                                                         at the first end-of-text token)
        t5     input_ids [1, L]                  -> cond.txt [1, L, D]   FluxPipeline._get_t5_prompt_embeds: the
                                                                         T5 encoder's last hidden states, no mask
        gemma  input_ids, attention_mask [1, L]  -> cond.txt [1, L, D],  SanaPipeline._get_gemma_prompt_embeds:
                                                    cond.txt_mask [1, L] the Gemma-2 model's last hidden states
                                                                         under the padding mask; the mask as float
    """

    ROLES = {"clip": (("input_ids",), ("pooled",)), "t5": (("input_ids",), ("txt",)),
             "gemma": (("input_ids", "attention_mask"), ("txt", "txt_mask"))}

    def __init__(self, role: str, model: nn.Module):
        super().__init__()
        if role not in self.ROLES:
            raise ValueError(f"text encoder role {role!r}: expected one of {sorted(self.ROLES)}")
        self.role, self.model = role, model

    @property
    def input_names(self) -> list[str]:
        return list(self.ROLES[self.role][0])

    @property
    def output_keys(self) -> list[str]:
        return list(self.ROLES[self.role][1])

    def forward(self, input_ids, attention_mask=None):
        if self.role == "clip":
            return self.model(input_ids=input_ids).pooler_output.contiguous()
        if self.role == "t5":
            return self.model(input_ids=input_ids)[0].contiguous()
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask)[0]
        return hidden.contiguous(), attention_mask.to(hidden.dtype)
