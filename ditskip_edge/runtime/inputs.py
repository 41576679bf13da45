"""One scheduled sample -> the named inputs of the training step (runtime/contract.py names them), numpy only.

    x0      the cache entry's clean latents (or `x0_from(sample)`: a device computing them from the photo)
    (an x0-only or cache-free bundle has no stored entry: `entry_from` defaults to runtime/subject.py's
    CacheFreeEntries, which reads the sample's x0 from the x0-only cache or computes it, computes the residuals with
    the bundle's forward programs and codes them in memory)
    noise   rng.normal(sample.noise_seed, x0.shape)        the portable RNG every runtime and app shares
    t       [sample.t]
    cond.*  the bundle's text conditioning (with per-photo captions: the row of the sample's photo)
    entry.* the cache entry's stored parts without x0 (encoded: the program decodes them)
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from . import rng
from .bundle import STORED, Bundle
from .cache_format import X0
from .conditioning import NamedInputs, SampleConditioning
from .contract import ENTRY_PREFIX
from .schedule import Sample


class StepInputs:
    """StepInputs(bundle)(sample) -> {"x0", "noise", "t", "cond.<k>", "entry.<part>"}.

    `x0_from(sample)`: clean latents computed on the device instead of the cache's; `entry_from(sample)`: the
    encoded entry from elsewhere than the bundle's cache (cache-report codes reference entries with other codecs)."""

    def __init__(self, bundle: Bundle, x0_from: Callable[[Sample], np.ndarray] | None = None,
                 entry_from: Callable[[Sample], dict[str, np.ndarray]] | None = None, keep_blocks: bool | None = None):
        if entry_from is None:
            if bundle.cache_mode != STORED:           # keep_blocks: CacheFreeEntries' (None: one block at a time)
                from .subject import CacheFreeEntries
                entry_from = CacheFreeEntries(bundle, keep_blocks)
            else:
                entry_from = (lambda s, cache=bundle.cache(): cache.read_encoded(s.index))
        self.entry_from = entry_from
        self.cond = SampleConditioning(bundle)
        self.x0_from = x0_from

    def __call__(self, sample: Sample) -> NamedInputs:
        entry = dict(self.entry_from(sample))
        x0 = entry.pop(X0)
        if self.x0_from is not None:
            x0 = self.x0_from(sample)
        named = {"x0": x0, "noise": rng.normal(sample.noise_seed, tuple(x0.shape)),
                 "t": np.array([sample.t], dtype=np.float32), **self.cond(sample)}
        named.update({ENTRY_PREFIX + k: v for k, v in entry.items()})
        return named
