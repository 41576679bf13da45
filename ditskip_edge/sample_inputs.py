"""What one scheduled sample feeds the model: clean latents x0 from the photo's crop, and the sample's noise.

    photo [3, H, W] --PatchSampler(crop_box)--> patch [1, 3, s_min, s_min] --LatentEncoder--> x0 [1, C, h, w]
    noise_seed --rng.normal--> noise [1, C, h, w]

The host computes these when it precomputes the residuals; a device recomputes them from the same photo and
schedule (device-side preprocessing), which is why the noise comes from the portable RNG.
"""

from __future__ import annotations

import torch

from .runtime import rng
from .models.latents import LatentEncoder
from .patch_sampling import PatchSampler
from .runtime.schedule import Sample


def sample_noise(sample: Sample, latent_shape: tuple[int, ...]) -> torch.Tensor:
    return torch.from_numpy(rng.normal(sample.noise_seed, tuple(latent_shape)))


def crop_tensor(sample: Sample) -> torch.Tensor:
    return torch.tensor(sample.crop_box, dtype=torch.float32)


@torch.no_grad()
def clean_latents(photo_pixels: torch.Tensor, sample: Sample, sampler: PatchSampler,
                  encoder: LatentEncoder) -> torch.Tensor:
    patch = sampler(photo_pixels[None], crop_tensor(sample))
    return encoder(patch)
