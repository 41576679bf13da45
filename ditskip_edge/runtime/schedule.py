"""The training schedule: for every training sample, which photo, which t, which crop box, which noise seed.

It is fixed before the residuals are precomputed (the residual cache holds one entry per scheduled sample) and it
is data: saved as JSON in the bundle, read by every runtime. Sample k is used at optimizer step k // grad_accum.

Dynamic patch sampling (PAPER.md section 1) decides each crop box here, in plain Python:
crop side for time t in [0, 1] is s(t) = s_min + t * (s_max - s_min), rounded to the model's pixel multiple and
clamped to [s_min, the photo's short side]; placement is uniform over the integer positions that keep the crop
inside the photo. (`ditskip_edge/patch_sampling.py`'s PatchSampler cuts and resizes the box in the graph.)

Legal ranges (a user mistake outside them is one `UserError` before any work): see `ScheduleConfig.validate` and
`check_photo_sizes`.
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import BundleError, UserError

log = logging.getLogger(__name__)

MAX_STEPS = 100_000              # optimizer steps in one schedule
MAX_GRAD_ACCUM = 256             # samples per optimizer step
MAX_SAMPLES = 1_000_000          # steps x grad_accum: one cache entry each
MAX_CROP_PX = 8192               # largest crop side (s_max) and train resolution (s_min) we accept
MAX_SEED = 2 ** 63 - 1
MAX_ASPECT = 4.0                 # a photo's long side / short side
MIN_SHORT_SIDE_FRACTION = 0.5    # a photo's short side must be >= this x s_min (crops upsampled at most 2x)
T_RANGE = (1e-4, 1 - 1e-4)       # drawn t is clamped into this interval


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
        _in_range("steps", self.steps, 1, MAX_STEPS)
        _in_range("grad-accum", self.grad_accum, 1, MAX_GRAD_ACCUM)
        if self.steps * self.grad_accum > MAX_SAMPLES:
            raise UserError(f"steps x grad-accum = {self.steps * self.grad_accum} samples: at most {MAX_SAMPLES} "
                            f"(each sample is one residual-cache entry)")
        _in_range("seed", self.seed, 0, MAX_SEED)
        if self.multiple_px < 1:
            raise UserError(f"pixel multiple must be >= 1, got {self.multiple_px}")
        if not self.multiple_px <= self.s_min_px <= MAX_CROP_PX or self.s_min_px % self.multiple_px:
            raise UserError(f"crop-min {self.s_min_px} px must be a multiple of {self.multiple_px} in "
                            f"[{self.multiple_px}, {MAX_CROP_PX}]")
        if not self.s_min_px <= self.s_max_px <= MAX_CROP_PX:
            raise UserError(f"crop-max {self.s_max_px} px must be in [crop-min {self.s_min_px}, {MAX_CROP_PX}]")
        if self.t_sampling not in ("uniform", "logit_normal"):
            raise UserError(f"t_sampling must be 'uniform' or 'logit_normal', got {self.t_sampling!r}")

    @property
    def num_samples(self) -> int:
        return self.steps * self.grad_accum


def _in_range(name: str, value, lo, hi) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise UserError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def check_photo_sizes(config: ScheduleConfig, sizes_hw: list[tuple[int, int]], names: list[str]) -> None:
    """Every photo (as normalised to the data resolution) must be big enough to crop at the train resolution and
    not a strip: short side >= MIN_SHORT_SIDE_FRACTION x s_min, long / short <= MAX_ASPECT."""
    min_short = max(config.multiple_px, math.ceil(MIN_SHORT_SIDE_FRACTION * config.s_min_px))
    for (h, w), name in zip(sizes_hw, names):
        short, long = min(h, w), max(h, w)
        if short < min_short:
            raise UserError(f"photo {name} is {w}x{h} px: its short side must be at least {min_short} px (half the "
                            f"train resolution {config.s_min_px} px)")
        if long > MAX_ASPECT * short:
            raise UserError(f"photo {name} is {w}x{h} px: aspect ratio {long / short:.1f}:1 is beyond "
                            f"{MAX_ASPECT:g}:1; crop it first")


def crop_side_px(t: float, s_min_px: int, s_max_px: int, multiple_px: int, short_side_px: int) -> tuple[int, bool]:
    """Crop side in pixels for time t, and whether the photo's short side clamped it. The side never exceeds the
    short side (rounded down to the multiple)."""
    limit = (short_side_px // multiple_px) * multiple_px
    if limit < multiple_px:
        raise ValueError(f"a photo with short side {short_side_px} px cannot hold a {multiple_px} px crop")
    raw = s_min_px + float(t) * (s_max_px - s_min_px)
    side = int(round(raw / multiple_px)) * multiple_px
    side = max(s_min_px, min(side, s_max_px))
    if side > limit:
        return limit, True
    return side, False


def place_crop(side_px: int, height_px: int, width_px: int, u_x: float, u_y: float) -> tuple[int, int]:
    """Top-left corner (x0, y0) from two uniforms in [0, 1): uniform over the valid integer positions."""
    if side_px > min(height_px, width_px):
        raise ValueError(f"crop side {side_px} px does not fit a {width_px}x{height_px} px photo")
    x0 = min(int(math.floor(u_x * (width_px - side_px + 1))), width_px - side_px)
    y0 = min(int(math.floor(u_y * (height_px - side_px + 1))), height_px - side_px)
    return x0, y0


@dataclass(frozen=True)
class Sample:
    index: int
    photo: int                 # index into the bundle's photo list
    t: float                   # rectified-flow time in (0, 1); 1 = pure noise
    crop_box: tuple[int, int, int]   # (x0_px, y0_px, side_px) in the normalised photo
    noise_seed: int            # portable RNG seed (rng.normal)


SAMPLE_FIELDS = ["index", "photo", "t", "crop_box", "noise_seed"]


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
                "sample_fields": SAMPLE_FIELDS}

    @staticmethod
    def from_json(d: dict) -> "Schedule":
        return Schedule(config=ScheduleConfig(**d["config"]), photo_names=tuple(d["photo_names"]),
                        samples=tuple(Sample(i, p, float(t), tuple(b), int(n)) for i, p, t, b, n in d["samples"]),
                        clamped_samples=int(d.get("clamped_samples", 0)))

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_json()))

    @staticmethod
    def load(path: Path) -> "Schedule":
        try:
            d = json.loads(Path(path).read_text())
            if d.get("sample_fields") != SAMPLE_FIELDS:
                raise KeyError("sample_fields")
            schedule = Schedule.from_json(d)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BundleError(f"{path}: not a readable schedule ({type(e).__name__}: {e})") from e
        if schedule.num_samples != schedule.config.num_samples:
            raise BundleError(f"{path}: {schedule.num_samples} samples for {schedule.config.steps} steps x "
                              f"{schedule.config.grad_accum}")
        return schedule


def _draw_t(rnd: random.Random, how: str) -> float:
    if how == "logit_normal":
        return 1.0 / (1.0 + math.exp(-rnd.gauss(0.0, 1.0)))
    return rnd.random()


def make_schedule(config: ScheduleConfig, photo_sizes_hw: list[tuple[int, int]], photo_names: list[str]) -> Schedule:
    """Photos are visited in a fresh random order each epoch; t, placement and noise seed are drawn per sample."""
    config.validate()
    if not photo_sizes_hw:
        raise UserError("a schedule needs at least one photo")
    check_photo_sizes(config, photo_sizes_hw, photo_names)
    rnd = random.Random(config.seed)
    n = config.num_samples
    order: list[int] = []
    samples, clamped = [], 0
    for k in range(n):
        if not order:
            order = list(range(len(photo_sizes_hw)))
            rnd.shuffle(order)
        p = order.pop()
        h, w = photo_sizes_hw[p]
        t = min(max(_draw_t(rnd, config.t_sampling), T_RANGE[0]), T_RANGE[1])
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
