"""A portable, counter-based random number generator.

The schedule stores a noise seed per sample; every runtime (Python host, ExecuTorch device trainer, the
Kotlin and Swift demo apps) must draw the *same* noise from it, because the residual cache was computed
for that noise. torch's generator cannot be reproduced outside torch, so noise comes from splitmix64:

    word(seed, i)  = splitmix64(seed + (i + 1) * 0x9E3779B97F4A7C15)       (uint64, wrapping)
    uniform(i)     = ((word >> 11) + 0.5) * 2**-53                          (in (0, 1))
    normal[i]      = sqrt(-2 ln uniform(2i)) * cos(2 pi uniform(2i + 1))    (Box-Muller, cos branch only)

Every element is independent of the others and of the tensor's shape: element i of a flattened
(row-major) tensor is normal[i]. The same few lines are written in Kotlin and Swift in the demo apps.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def uniform(seed: int, count: int, offset: int = 0) -> np.ndarray:
    """`count` uniforms in (0, 1), float64, for counters offset .. offset+count-1."""
    i = np.arange(offset, offset + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + (i + np.uint64(1)) * _GOLDEN
    w = _splitmix64(x)
    return ((w >> np.uint64(11)).astype(np.float64) + 0.5) * (2.0 ** -53)


def normal(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal float32 array of `shape`, element i from counters 2i and 2i+1."""
    n = int(np.prod(shape)) if len(shape) else 1
    u = uniform(seed, 2 * n)
    z = np.sqrt(-2.0 * np.log(u[0::2])) * np.cos(2.0 * np.pi * u[1::2])
    return z.astype(np.float32).reshape(shape)
