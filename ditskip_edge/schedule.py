"""The training schedule: for every training sample, which photo, which t, which crop box, which noise seed.

It is fixed before the residuals are precomputed (the residual cache holds one entry per scheduled sample) and it
is data: saved as JSON in the bundle, read by every runtime. Sample k is used at optimizer step k // grad_accum.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import UserError
from .patch_sampling import crop_side_px, place_crop

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScheduleConfig:
    steps: int = 100                 # optimizer steps
    grad_accum: int = 1              # samples per optimizer step
    s_min_px: int = 256              # every crop is resized to this (train resolution)
    s_max_px: int = 512              # crop side at t = 1 (data resolution)
    multiple_px: int = 16            # crop sides are multiples of this
    seed: int = 0
    t_sampling: str = "uniform"      # "uniform" | "logit_normal" (SD3/FLUX-style)
    dynamic_patches: bool = True     # False: the whole photo's centre square resized to s_min (paper's ablation)

    def validate(self) -> None:
        if self.steps < 0:
            raise UserError(f"steps must be >= 0, got {self.steps}")
        if self.grad_accum < 1:
            raise UserError(f"grad_accum must be >= 1, got {self.grad_accum}")
        if self.s_min_px <= 0 or self.s_min_px % self.multiple_px:
            raise UserError(f"crop-min {self.s_min_px} px must be a positive multiple of {self.multiple_px}")
        if self.s_max_px < self.s_min_px:
            raise UserError(f"crop-max {self.s_max_px} px must be >= crop-min {self.s_min_px} px")
        if self.t_sampling not in ("uniform", "logit_normal"):
            raise UserError(f"t_sampling must be 'uniform' or 'logit_normal', got {self.t_sampling!r}")


@dataclass(frozen=True)
class Sample:
    index: int
    photo: int                 # index into the bundle's photo list
    t: float                   # rectified-flow time in (0, 1); 1 = pure noise
    crop_box: tuple[int, int, int]   # (x0_px, y0_px, side_px) in the normalised photo
    noise_seed: int            # portable RNG seed (rng.normal)


@dataclass(frozen=True)
class Schedule:
    config: ScheduleConfig
    photo_names: tuple[str, ...]
    samples: tuple[Sample, ...]
    clamped_samples: int = 0   # crops clamped by a photo smaller than s_max

    @property
    def num_samples(self) -> int:
        return len(self.samples)

    def samples_for_step(self, step: int) -> tuple[Sample, ...]:
        a = self.config.grad_accum
        return self.samples[step * a:(step + 1) * a]

    def to_json(self) -> dict:
        return {"config": asdict(self.config), "photo_names": list(self.photo_names),
                "clamped_samples": self.clamped_samples,
                "samples": [[s.index, s.photo, s.t, list(s.crop_box), s.noise_seed] for s in self.samples],
                "sample_fields": ["index", "photo", "t", "crop_box", "noise_seed"]}

    @staticmethod
    def from_json(d: dict) -> "Schedule":
        return Schedule(config=ScheduleConfig(**d["config"]), photo_names=tuple(d["photo_names"]),
                        samples=tuple(Sample(i, p, float(t), tuple(b), int(n)) for i, p, t, b, n in d["samples"]),
                        clamped_samples=int(d.get("clamped_samples", 0)))

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_json()))

    @staticmethod
    def load(path: Path) -> "Schedule":
        return Schedule.from_json(json.loads(Path(path).read_text()))


def _draw_t(rnd: random.Random, how: str) -> float:
    if how == "logit_normal":
        import math
        return 1.0 / (1.0 + math.exp(-rnd.gauss(0.0, 1.0)))
    return rnd.random()


def make_schedule(config: ScheduleConfig, photo_sizes_hw: list[tuple[int, int]], photo_names: list[str]) -> Schedule:
    """Photos are visited in a fresh random order each epoch; t, placement and noise seed are drawn per sample."""
    config.validate()
    if not photo_sizes_hw:
        raise UserError("a schedule needs at least one photo")
    rnd = random.Random(config.seed)
    n = config.steps * config.grad_accum
    order: list[int] = []
    samples, clamped = [], 0
    for k in range(n):
        if not order:
            order = list(range(len(photo_sizes_hw)))
            rnd.shuffle(order)
        p = order.pop()
        h, w = photo_sizes_hw[p]
        t = min(max(_draw_t(rnd, config.t_sampling), 1e-4), 1 - 1e-4)
        u_x, u_y = rnd.random(), rnd.random()
        noise_seed = rnd.getrandbits(63)
        if config.dynamic_patches:
            side, was_clamped = crop_side_px(t, config.s_min_px, config.s_max_px, config.multiple_px, min(h, w))
            x0, y0 = place_crop(side, h, w, u_x, u_y)
        else:   # ablation: no dynamic patches, the largest centred square
            side = min(h, w)
            was_clamped = False
            x0, y0 = (w - side) // 2, (h - side) // 2
        clamped += was_clamped
        samples.append(Sample(k, p, t, (x0, y0, side), noise_seed))
    if clamped:
        log.warning("%d of %d crops were clamped: a photo's short side is below crop-max %d px", clamped, n,
                    config.s_max_px)
    return Schedule(config, tuple(photo_names), tuple(samples), clamped)
