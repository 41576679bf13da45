"""Pixels -> autoencoder latents, the model's own autoencoder (AutoencoderKL for FLUX, AutoencoderDC for SANA).

Deterministic: FLUX uses the posterior mode (no sampling), so the device recomputes the same latents.
Normalisation as the pipelines do it: FLUX (z - shift_factor) * scaling_factor, SANA z * scaling_factor.

Pixel-space models (`flux-testbed`) have no learned autoencoder: `PixelAutoencoder` is an exact, invertible
space-to-depth (pixel_unshuffle by `factor`), image [B, 3, S, S] -> [B, 3 f^2, S/f, S/f], scaling 1, shift 0.
"""

from __future__ import annotations

import contextlib
import copy
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..runtime.errors import UserError
from .specs import FLUX_ARCH, ModelSpec


class PixelAutoencoder(nn.Module):
    """The identity-like "autoencoder" of pixel-space models: space-to-depth by `factor` (no weights)."""

    kind = "pixel"

    def __init__(self, factor: int = 2, in_channels: int = 3):
        super().__init__()
        self.factor = int(factor)
        self.config = SimpleNamespace(scaling_factor=1.0, shift_factor=0.0, kind="pixel", factor=self.factor,
                                      in_channels=int(in_channels),
                                      latent_channels=int(in_channels) * self.factor ** 2)

    def encode(self, image: torch.Tensor) -> torch.Tensor:
        return F.pixel_unshuffle(image, self.factor)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return F.pixel_shuffle(latents, self.factor)


class LatentEncoder(nn.Module):
    """image [B, 3, S, S] in [-1, 1] -> latents [B, C, S/f, S/f]. With `encode_tiling` (a tiled `encode_tiling`
    record) the encoder runs as diffusers' own tiled_encode with those tiles (the reference of the device's tiled
    encode, runtime/tiling.py); decoding is never tiled here (enable_diffusers_tiling)."""

    def __init__(self, arch: str, vae: nn.Module, encode_tiling: dict | None = None):
        super().__init__()
        self.arch = arch
        self.vae = vae
        self.scaling = float(vae.config.scaling_factor)
        self.shift = float(getattr(vae.config, "shift_factor", None) or 0.0)
        self.encode_tiling = encode_tiling if encode_tiling and encode_tiling.get("tiled") else None

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if self.encode_tiling is None:
            return self._encode(image)
        t = self.encode_tiling
        with diffusers_tiling(self.vae, int(t["tile_px"]), int(t["stride_px"]), int(t["scale"])):
            return self._encode(image)

    def _encode(self, image: torch.Tensor) -> torch.Tensor:
        if isinstance(self.vae, PixelAutoencoder):
            z = self.vae.encode(image)
        elif self.arch == FLUX_ARCH:
            z = self.vae.encode(image).latent_dist.mode()
        else:
            z = self.vae.encode(image).latent
        return (z - self.shift) * self.scaling

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        if isinstance(self.vae, PixelAutoencoder):
            return self.vae.decode(latents / self.scaling + self.shift)
        return self.vae.decode(latents / self.scaling + self.shift).sample


def _with_children(module: nn.Module, **children) -> nn.Module:
    """A shallow copy of `module` whose named children are replaced (the rest, weights included, shared)."""
    new = copy.copy(module)
    new._modules = {**module._modules, **children}
    return new


def encoder_stages(arch: str, vae: nn.Module) -> list[nn.Module]:
    """The encoder of LatentEncoder(arch, vae) as a chain of modules whose composition is that encoder, one per
    encoder stage (compile --encode-stages: one program per stage, so a device holds one stage's weights at a time;
    XNNPACK packs a program's convolution weights into anonymous memory when it loads it):

        stage 0        conv_in + down block 0                                [1, 3, H, W] -> features
        stage 1..n-2   down block k (AutoencoderKL: every down block but the first; the mid block goes last)
        last           AutoencoderDC: the last down block + diffusers' output head (conv_out + its channel-average
                       shortcut); AutoencoderKL: the mid block + norm / act / conv_out (+ quant_conv), the posterior's
                       mode; then LatentEncoder's shift and scaling                         features -> latents

    Every stage runs diffusers' own modules; the last one runs diffusers' Encoder.forward and AutoencoderXX.encode on
    a shallow copy of the encoder whose conv_in is an identity and whose down blocks are the remaining ones, so the
    output head is diffusers' code, not a copy of it. Untiled (the stage sees whatever tile it is given)."""
    if isinstance(vae, PixelAutoencoder) or not hasattr(vae, "encoder"):
        raise UserError("--encode-stages: this model encodes by a pixel (un)shuffle, there is no encoder to split")
    enc = vae.encoder
    blocks = list(enc.down_blocks)
    is_kl = arch == FLUX_ARCH
    first = nn.Sequential(enc.conv_in, blocks[0])
    middle = blocks[1:] if is_kl else blocks[1:-1]
    head_blocks = nn.ModuleList([] if is_kl else blocks[-1:])
    head_encoder = _with_children(enc, conv_in=nn.Identity(), down_blocks=head_blocks)
    head_vae = _with_children(vae, encoder=head_encoder, decoder=None)
    head_vae.use_tiling, head_vae.use_slicing = False, False
    return [first, *middle, LatentEncoder(arch, head_vae)]


def _tile_and_stride(spec: ModelSpec, tile_px: int, flag: str, what: str) -> tuple[int, int]:
    """(tile, stride) in latent cells for tiles of tile_px, as diffusers' autoencoders tile: AutoencoderKL (FLUX)
    overlaps a quarter tile, AutoencoderDC (SANA) strides 7/8 of a tile (its default 448 of 512 px). One line for a
    tile the autoencoder cannot take."""
    f = spec.vae_scale_factor
    if (spec.vae_config or {}).get("kind") == "pixel":
        raise UserError(f"{flag}: {spec.name} {what}s by a pixel (un)shuffle, there is no {what}r to tile")
    tile = tile_px // f
    if tile_px % f or tile < 2:
        raise UserError(f"{flag} {tile_px}: expected a multiple of {f} px (a latent cell), at least {2 * f}")
    if spec.arch == FLUX_ARCH:
        if tile % 4:
            raise UserError(f"{flag} {tile_px}: AutoencoderKL overlaps its tiles by a quarter; expected a multiple "
                            f"of {4 * f} px")
        return tile, tile * 3 // 4
    return tile, max(1, tile * 7 // 8)


def decode_tiling(spec: ModelSpec, latent_side: int, tile_px: int | None) -> dict:
    """The tiles the decoder runs on, as diffusers' autoencoders tile (runtime/tiling.py; _tile_and_stride). No
    tiling (one tile, the whole latent) without tile_px or when the picture fits one tile."""
    f = spec.vae_scale_factor
    one = {"tile_latent": latent_side, "stride_latent": latent_side, "scale": f, "tiled": False}
    if tile_px is None or tile_px // f >= latent_side:
        return one
    tile, stride = _tile_and_stride(spec, tile_px, "--decode-tile-px", "decode")
    return {"tile_latent": tile, "stride_latent": stride, "scale": f, "tiled": True}


def encode_tiling(spec: ModelSpec, s_min_px: int, tile_px: int | None) -> dict:
    """The pixel tiles the encoder runs on in the subject stage (compile --encode-tile-px; the manifest's
    `encode_tiling` record), as diffusers' autoencoders tile an encode (_tile_and_stride), in whole latent cells. No
    tiling (one tile, the whole s_min crop) without tile_px or when the crop fits one tile."""
    f = spec.vae_scale_factor
    one = {"tile_px": s_min_px, "stride_px": s_min_px, "scale": f, "tiled": False}
    if tile_px is None or tile_px >= s_min_px:
        return one
    tile, stride = _tile_and_stride(spec, tile_px, "--encode-tile-px", "encode")
    return {"tile_px": tile * f, "stride_px": stride * f, "scale": f, "tiled": True}


_TILING_ATTRS = ("use_tiling", "tile_sample_min_size", "tile_latent_min_size", "tile_overlap_factor",
                 "tile_sample_min_height", "tile_sample_min_width", "tile_sample_stride_height",
                 "tile_sample_stride_width", "tile_latent_min_height", "tile_latent_min_width")


def _set_diffusers_tiling(vae: nn.Module, tile_px: int, stride_px: int, f: int) -> None:
    """diffusers' tiling attributes for tiles of tile_px pixels (tile_px / f latent cells) every stride_px."""
    if hasattr(vae, "tile_overlap_factor"):                   # AutoencoderKL: a quarter-tile overlap
        tile = tile_px // f
        if stride_px != tile_px * 3 // 4 or tile % 4:
            raise ValueError(f"AutoencoderKL tiles overlap by a quarter: tile {tile_px} px, stride {stride_px} px "
                             f"cannot be set")
        vae.use_tiling = True
        vae.tile_sample_min_size, vae.tile_latent_min_size, vae.tile_overlap_factor = tile_px, tile, 0.25
    else:                                                     # AutoencoderDC
        vae.enable_tiling(tile_sample_min_height=tile_px, tile_sample_min_width=tile_px,
                          tile_sample_stride_height=stride_px, tile_sample_stride_width=stride_px)


@contextlib.contextmanager
def diffusers_tiling(vae: nn.Module, tile_px: int, stride_px: int, f: int):
    """diffusers' own tiling on `vae` for the block's calls, its previous settings restored after."""
    saved = {a: getattr(vae, a) for a in _TILING_ATTRS if hasattr(vae, a)}
    try:
        _set_diffusers_tiling(vae, tile_px, stride_px, f)
        yield vae
    finally:
        for a, v in saved.items():
            setattr(vae, a, v)


def enable_diffusers_tiling(vae: nn.Module, tiling: dict | None) -> nn.Module:
    """Turn on diffusers' own tiled decode with the tiles of a bundle's generation.decode record (export/
    generation_stage.py decode_tiling): the host reference the device's tiled decode (runtime/tiling.py) matches."""
    if not tiling or not tiling.get("tiled"):
        return vae
    f, tile, stride = int(tiling["scale"]), int(tiling["tile_latent"]), int(tiling["stride_latent"])
    _set_diffusers_tiling(vae, tile * f, stride * f, f)
    return vae
