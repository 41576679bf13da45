"""The sampler of generation: rectified-flow Euler with classifier-free guidance, numpy only.

The schedule is diffusers' FlowMatchEulerDiscreteScheduler as FluxPipeline drives it (diffusers 0.42.1,
`pipeline_flux.py` step 5 and `scheduling_flow_match_euler_discrete.py` `set_timesteps` / `step`):

    sigmas  = linspace(1, 1/N, N)  (float64, then float32)
    shifted = exp(mu) / (exp(mu) + (1/s - 1))        use_dynamic_shifting, time_shift_type "exponential"
            | mu / (mu + (1/s - 1))                   use_dynamic_shifting, "linear"
            | shift s / (1 + (shift - 1) s)           otherwise (shift 1: unchanged)
    sigmas  = shifted + [0]                           float32, N + 1 values
    for i in 0 .. N-1:  t = sigmas[i]                 the model's time (rectified flow: 1 = noise)
        v = v_uncond + g (v_cond - v_uncond)          classifier-free guidance, uncond = the empty prompt
        x = x + (sigmas[i+1] - sigmas[i]) v           Euler, in float32

`mu` for dynamic shifting depends on the image's token count, so the compiler computes it once for the bundle's
fixed resolution (FluxPipeline's `calculate_shift`) and records it with the scheduler's config in the manifest
(`generation.sampler`). Karras / exponential / beta sigmas, shift_terminal and inverted sigmas are refused there.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import BundleError

TIME_SHIFT_TYPES = ("exponential", "linear")


def sigmas(steps: int, shift: float = 1.0, use_dynamic_shifting: bool = False, mu: float | None = None,
           time_shift_type: str = "exponential") -> np.ndarray:
    """N + 1 float32 sigmas from 1 down to 0 (the last is 0)."""
    if steps < 1:
        raise ValueError(f"steps {steps}: expected >= 1")
    s = np.linspace(1.0, 1.0 / steps, steps).astype(np.float32)
    if use_dynamic_shifting:
        if mu is None:
            raise BundleError("generation.sampler: use_dynamic_shifting needs mu")
        if time_shift_type == "exponential":
            s = math.exp(mu) / (math.exp(mu) + (1 / s - 1) ** 1.0)
        elif time_shift_type == "linear":
            s = mu / (mu + (1 / s - 1) ** 1.0)
        else:
            raise BundleError(f"generation.sampler: time_shift_type {time_shift_type!r}, expected one of "
                              f"{TIME_SHIFT_TYPES}")
    else:
        s = shift * s / (1 + (shift - 1) * s)
    return np.concatenate([np.asarray(s, np.float32), np.zeros(1, np.float32)])


def sigmas_for(sampler: dict, steps: int) -> np.ndarray:
    """The schedule of the manifest's `generation.sampler` record."""
    return sigmas(steps, float(sampler.get("shift", 1.0)), bool(sampler.get("use_dynamic_shifting", False)),
                  sampler.get("mu"), sampler.get("time_shift_type", "exponential"))


def guided(v_uncond: np.ndarray, v_cond: np.ndarray, guidance: float) -> np.ndarray:
    return (v_uncond + np.float32(guidance) * (v_cond - v_uncond)).astype(np.float32)


def euler_step(x: np.ndarray, v: np.ndarray, sigma: np.float32, sigma_next: np.float32) -> np.ndarray:
    return (x + (np.float32(sigma_next) - np.float32(sigma)) * v).astype(np.float32)
