"""Pixels -> autoencoder latents, the model's own autoencoder (AutoencoderKL for FLUX, AutoencoderDC for SANA).

Deterministic: FLUX uses the posterior mode (no sampling), so the device recomputes the same latents.
Normalisation as the pipelines do it: FLUX (z - shift_factor) * scaling_factor, SANA z * scaling_factor.

Pixel-space models (`flux-testbed`) have no learned autoencoder: `PixelAutoencoder` is an exact, invertible
space-to-depth (pixel_unshuffle by `factor`), image [B, 3, S, S] -> [B, 3 f^2, S/f, S/f], scaling 1, shift 0.
"""

from __future__ import annotations

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
    """image [B, 3, S, S] in [-1, 1] -> latents [B, C, S/f, S/f]."""

    def __init__(self, arch: str, vae: nn.Module):
        super().__init__()
        self.arch = arch
        self.vae = vae
        self.scaling = float(vae.config.scaling_factor)
        self.shift = float(getattr(vae.config, "shift_factor", None) or 0.0)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
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


def decode_tiling(spec: ModelSpec, latent_side: int, tile_px: int | None) -> dict:
    """The tiles the decoder runs on, as diffusers' autoencoders tile (runtime/tiling.py): AutoencoderKL (FLUX)
    overlaps a quarter tile, AutoencoderDC (SANA) strides 7/8 of a tile (its default 448 of 512 px). No tiling
    (one tile, the whole latent) without tile_px or when the picture fits one tile."""
    f = spec.vae_scale_factor
    one = {"tile_latent": latent_side, "stride_latent": latent_side, "scale": f, "tiled": False}
    if tile_px is None or tile_px // f >= latent_side:
        return one
    kind = (spec.vae_config or {}).get("kind")
    if kind == "pixel":
        raise UserError(f"--decode-tile-px: {spec.name} decodes by a pixel shuffle, there is no decoder to tile")
    tile = tile_px // f
    if tile_px % f or tile < 2:
        raise UserError(f"--decode-tile-px {tile_px}: expected a multiple of {f} px (a latent cell), at least "
                        f"{2 * f}")
    if spec.arch == FLUX_ARCH:
        if tile % 4:
            raise UserError(f"--decode-tile-px {tile_px}: AutoencoderKL overlaps its tiles by a quarter; expected a "
                            f"multiple of {4 * f} px")
        stride = tile * 3 // 4
    else:
        stride = max(1, tile * 7 // 8)
    return {"tile_latent": tile, "stride_latent": stride, "scale": f, "tiled": True}


def enable_diffusers_tiling(vae: nn.Module, tiling: dict | None) -> nn.Module:
    """Turn on diffusers' own tiled decode with the tiles of a bundle's generation.decode record (export/
    generation_stage.py decode_tiling): the host reference the device's tiled decode (runtime/tiling.py) matches."""
    if not tiling or not tiling.get("tiled"):
        return vae
    f, tile, stride = int(tiling["scale"]), int(tiling["tile_latent"]), int(tiling["stride_latent"])
    if hasattr(vae, "tile_overlap_factor"):                   # AutoencoderKL: a quarter-tile overlap
        if stride != tile * 3 // 4 or tile % 4:
            raise ValueError(f"AutoencoderKL tiles overlap by a quarter: tile {tile}, stride {stride} cannot be set")
        vae.use_tiling = True
        vae.tile_sample_min_size, vae.tile_latent_min_size, vae.tile_overlap_factor = tile * f, tile, 0.25
    else:                                                     # AutoencoderDC
        vae.enable_tiling(tile_sample_min_height=tile * f, tile_sample_min_width=tile * f,
                          tile_sample_stride_height=stride * f, tile_sample_stride_width=stride * f)
    return vae
