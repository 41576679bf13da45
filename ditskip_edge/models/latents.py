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

from .specs import FLUX_ARCH


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
