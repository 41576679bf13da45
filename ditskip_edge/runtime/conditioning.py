"""The text conditioning a training sample trains with, numpy only (the step's `cond.*` inputs, runtime/inputs.py;
the subject stage's forward programs, runtime/subject.py)."""

from __future__ import annotations

import numpy as np

from .bundle import PER_PHOTO_TEXT, Bundle
from .contract import COND_PREFIX
from .schedule import Sample

NamedInputs = dict[str, np.ndarray]


class SampleConditioning:
    """SampleConditioning(bundle)(sample) -> {"cond.<k>": [1, ...]}: the text conditioning a sample trains with, the
    prompt's for every sample, or with per-photo captions the row of the sample's photo (one row held at a time:
    samples come in schedule order, their photos in any order)."""

    def __init__(self, bundle: Bundle):
        self.bundle = bundle
        self.per_photo = bundle.text_rows == PER_PHOTO_TEXT
        self._held: tuple[int, NamedInputs]
        self._hold(0)                    # reads photo 0's row now: bad rows are refused before the first step

    def _hold(self, row: int) -> None:
        self._held = (row, {COND_PREFIX + k: v for k, v in self.bundle.text_conditioning(row).items()})

    def __call__(self, sample: Sample) -> NamedInputs:
        row = sample.photo if self.per_photo else 0
        if self._held[0] != row:
            self._hold(row)
        return self._held[1]
