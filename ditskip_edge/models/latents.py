"""Pixels -> autoencoder latents, the model's own autoencoder (AutoencoderKL for FLUX, AutoencoderDC for SANA).

Deterministic: FLUX uses the posterior mode (no sampling), so the device recomputes the same latents.
Normalisation as the pipelines do it: FLUX (z - shift_factor) * scaling_factor, SANA z * scaling_factor.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .specs import FLUX_ARCH


class LatentEncoder(nn.Module):
    """image [B, 3, S, S] in [-1, 1] -> latents [B, C, S/f, S/f]."""

    def __init__(self, arch: str, vae: nn.Module):
        super().__init__()
        self.arch = arch
        self.vae = vae
        self.scaling = float(vae.config.scaling_factor)
        self.shift = float(getattr(vae.config, "shift_factor", None) or 0.0)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if self.arch == FLUX_ARCH:
            z = self.vae.encode(image).latent_dist.mode()
        else:
            z = self.vae.encode(image).latent
        return (z - self.shift) * self.scaling

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return self.vae.decode(latents / self.scaling + self.shift).sample
