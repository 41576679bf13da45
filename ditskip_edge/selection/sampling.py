"""Images to compare: the model's own rectified-flow sampler, and the one-forward proxy.

Rectified flow (as the skip model trains it): x_t = (1 - t) x0 + t noise, the model predicts v = noise - x0.

- `generate`: Euler from t = 1 (pure noise) to t = 0 on a uniform grid of `steps` steps,
  x_{t'} = x_t + (t' - t) v(x_t, t), with the view's full forward, in latent space at the train resolution,
  decoded by the model's autoencoder. No timestep shift and no classifier-free guidance (the tiny models have
  none; FLUX.1-dev's guidance embedding is fed from the conditioning as the view does).
- `predict_clean`: the proxy. For the subject's photo latents x0 and a noise seed, at each proxy time t one
  forward gives x0_hat = x_t - t v(x_t, t), decoded. No sampling loop: `len(times)` forwards instead of `steps`.

Noise comes from the portable RNG (`ditskip_edge/runtime/rng.py`) so a seed means the same noise everywhere.
"""

from __future__ import annotations

import torch

from ..runtime import rng
from ..models.latents import LatentEncoder
from ..models.views import Conditioning, DiTView


def latent_noise(seed: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
    return torch.from_numpy(rng.normal(seed, tuple(latent_shape)))


@torch.no_grad()
def generate(view: DiTView, decoder: LatentEncoder, cond: Conditioning, latent_shape: tuple[int, ...], seed: int,
             steps: int) -> torch.Tensor:
    """-> image [1, 3, S, S] in about [-1, 1]."""
    x = view.pack(latent_noise(seed, latent_shape))
    ts = torch.linspace(1.0, 0.0, steps + 1)
    for t, t_next in zip(ts[:-1], ts[1:]):
        v = view(x, t.reshape(1), cond)
        x = x + (t_next - t) * v
    return decoder.decode(view.unpack(x, latent_shape[-2:]))


@torch.no_grad()
def predict_clean(view: DiTView, decoder: LatentEncoder, cond: Conditioning, x0: torch.Tensor, seed: int,
                  times: tuple[float, ...]) -> torch.Tensor:
    """x0 [1, C, h, w] clean latents -> decoded x0_hat per time, [len(times), 3, S, S]."""
    noise = latent_noise(seed, tuple(x0.shape))
    out = []
    for t in times:
        x_t = (1 - t) * x0 + t * noise
        v = view(view.pack(x_t), torch.tensor([float(t)]), cond)
        out.append(view.pack(x_t) - t * v)
    x0_hat = torch.cat([view.unpack(x, tuple(x0.shape[-2:])) for x in out], 0)
    return decoder.decode(x0_hat)
