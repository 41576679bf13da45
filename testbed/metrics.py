"""Fidelity metrics that need no download (the testbed's stand-ins for DINO / CLIP-I and CLIP-T).

Every image is first split into background and foreground: the background colour is the median of the 2-pixel
border, the foreground is every pixel farther than FG_DISTANCE (RGB units, 0..255) from it.

Subject fidelity
- `SubjectEmbedder`: a fixed, hand-defined embedding of the foreground object: its mask cropped to its bounding box
  and resized to 16x16, minus 0.5 (shape), and a 4x4x4 RGB histogram of its pixels (square-rooted: colours and
  texture proportions). Each part L2-normalised, concatenated, / sqrt(2). `subject_similarity` = mean cosine
  similarity to the subject's references (like DINO in the paper: mean over references). An empty foreground
  embeds as zeros (similarity 0).
- Attribute checks: `colour_agreement` (at least COLOUR_SHARE of the foreground lies within COLOUR_TOLERANCE of the
  subject's main colour) and `shape_iou` (IoU of the bounding-box-normalised mask with the references' mean mask).
- `nearest_shape`: which of the scenes' SHAPES the foreground is (highest IoU of its mask, cropped to the square
  around its bounding box so that the aspect ratio stays (a bar is not a square), with each shape's, drawn plain and
  large; None for an empty foreground): whether a model draws the prompted shape at all.
Prompt fidelity
- `background_match`: the estimated background's nearest palette colour is the one the prompt asked for.
- `marking_share`: the share of the object's interior (the foreground mask eroded by one pixel, so that the blend of
  an edge with the background is not counted) drawn in the subject's marking (`Subject.marking`: the heart's white
  dots, the star's orange centre, the bowtie's cyan stripes, the crescent's dark checks), the detail no prompt names,
  so the base model draws none of it: pixels nearer the marking than the subject's main colour and within
  MARKING_TOLERANCE of it. Nearest of the two, not COLOUR_TOLERANCE alone: the testbed draws a marking pale and with
  per-pixel colour noise, and within COLOUR_TOLERANCE counted 0.03-0.09 of the interior on the demo LoRAs' hearts,
  stars and bowties where this counts 0.06-0.36 (the marking check, removed once recorded:
  `git show eb714ee:benchmarks/results/marking_check.md`; the references 0.23-0.51, the base 0.00-0.03).
  `marking_present`: at least MARKING_SHARE_OF_REFERENCES of the references' own share (resized to the image's size).
- `subject_recognised`: shape, colour and background all as asked, and with a marking colour, the marking present
  (the demo's "recognised in k of 4 prompts"). Without the marking, a prompt naming the colour and the class already
  gets a base model "recognised" where it draws the class well (the bowtie: 0.88 of the base's pictures,
  `testbed/results/demo_subjects.md`), and the verdict says nothing about personalization.

`mean_ci` gives a mean and a 95% Student-t interval (over images, seeds x prompts, or over study units; before
2026-12-01 a normal approximation, too narrow for a few units).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .scenes import PALETTE, RGB, SHAPES, _grid, shape_mask

FG_DISTANCE = 60.0
COLOUR_TOLERANCE = 70.0
COLOUR_SHARE = 0.3
MASK_PX = 16
MIN_FG_FRACTION = 0.01
MARKING_SHARE_OF_REFERENCES = 0.5
MARKING_TOLERANCE = 2 * COLOUR_TOLERANCE


def to_rgb255(image: torch.Tensor) -> np.ndarray:
    """[3, H, W] in [-1, 1] -> [H, W, 3] float in 0..255."""
    return ((image.detach().float().clamp(-1, 1) + 1) * 127.5).permute(1, 2, 0).cpu().numpy()


def background_colour(rgb: np.ndarray) -> np.ndarray:
    border = np.concatenate([rgb[:2].reshape(-1, 3), rgb[-2:].reshape(-1, 3), rgb[:, :2].reshape(-1, 3),
                             rgb[:, -2:].reshape(-1, 3)])
    return np.median(border, axis=0)


def foreground_mask(rgb: np.ndarray) -> np.ndarray:
    return np.linalg.norm(rgb - background_colour(rgb), axis=-1) > FG_DISTANCE


def nearest_palette_name(rgb: np.ndarray) -> str:
    names = list(PALETTE)
    d = [np.linalg.norm(np.asarray(PALETTE[n], np.float32) - rgb) for n in names]
    return names[int(np.argmin(d))]


def _bbox_mask(mask: np.ndarray, square: bool = False) -> np.ndarray | None:
    """The foreground mask cropped to its bounding box (square: to the square around it, centred, so that the aspect
    ratio stays), resized to MASK_PX x MASK_PX (float in [0, 1]); None for an empty foreground."""
    if mask.mean() < MIN_FG_FRACTION:
        return None
    ys, xs = np.nonzero(mask)
    crop = mask[ys.min():ys.max() + 1, xs.min():xs.max() + 1].astype(np.float32)
    if square:
        h, w = crop.shape
        side = max(h, w)
        crop = np.pad(crop, (((side - h) // 2, side - h - (side - h) // 2), ((side - w) // 2, side - w - (side - w) // 2)))
    return F.interpolate(torch.from_numpy(crop)[None, None], size=(MASK_PX, MASK_PX), mode="area")[0, 0].numpy()


@dataclass
class SubjectEmbedder:
    bins: int = 4

    def __call__(self, image: torch.Tensor) -> np.ndarray:
        rgb = to_rgb255(image)
        mask = foreground_mask(rgb)
        m = _bbox_mask(mask)
        dim = MASK_PX * MASK_PX + self.bins ** 3
        if m is None:
            return np.zeros(dim, np.float32)
        shape = m.reshape(-1) - 0.5                     # inside +, outside - (a full box is not a zero vector)
        q = np.clip((rgb[mask] / 256 * self.bins).astype(int), 0, self.bins - 1)
        hist = np.bincount(q[:, 0] * self.bins ** 2 + q[:, 1] * self.bins + q[:, 2], minlength=self.bins ** 3)
        hist = np.sqrt(hist / hist.sum())
        parts = [v / (np.linalg.norm(v) + 1e-8) for v in (shape, hist)]
        return (np.concatenate(parts) / math.sqrt(2)).astype(np.float32)


def subject_similarity(image: torch.Tensor, references: list[torch.Tensor], embedder: SubjectEmbedder) -> float:
    e = embedder(image)
    return float(np.mean([e @ embedder(r) for r in references]))


def colour_share(image: torch.Tensor, colour: RGB) -> float:
    """Fraction of the foreground within COLOUR_TOLERANCE of `colour` (0 for an empty foreground)."""
    rgb = to_rgb255(image)
    mask = foreground_mask(rgb)
    if mask.mean() < MIN_FG_FRACTION:
        return 0.0
    return float((np.linalg.norm(rgb[mask] - np.asarray(colour, np.float32), axis=-1) <= COLOUR_TOLERANCE).mean())


def colour_agreement(image: torch.Tensor, colour: RGB) -> float:
    return float(colour_share(image, colour) >= COLOUR_SHARE)


def reference_mask(references: list[torch.Tensor]) -> np.ndarray:
    masks = [_bbox_mask(foreground_mask(to_rgb255(r))) for r in references]
    return np.mean([m for m in masks if m is not None], axis=0)


def shape_iou(image: torch.Tensor, ref_mask: np.ndarray) -> float:
    m = _bbox_mask(foreground_mask(to_rgb255(image)))
    if m is None:
        return 0.0
    return _iou(m, ref_mask)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a > 0.5, b > 0.5
    return float((a & b).sum() / max((a | b).sum(), 1))


_SHAPE_MASKS: dict[str, np.ndarray] = {}


def shape_template(shape: str) -> np.ndarray:
    """The shape drawn plain and large at the centre of a 64 px scene, normalised as `_bbox_mask(square=True)`."""
    if shape not in _SHAPE_MASKS:
        x, y = _grid(64, 1)
        _SHAPE_MASKS[shape] = _bbox_mask(shape_mask(shape, x, y, 32.0, 32.0, 17.0), square=True)
    return _SHAPE_MASKS[shape]


def nearest_shape(image: torch.Tensor) -> str | None:
    m = _bbox_mask(foreground_mask(to_rgb255(image)), square=True)
    if m is None:
        return None
    return max(SHAPES, key=lambda s: _iou(m, shape_template(s)))


def background_match(image: torch.Tensor, colour_name: str) -> float:
    return float(nearest_palette_name(background_colour(to_rgb255(image))) == colour_name)


def object_interior(rgb: np.ndarray) -> np.ndarray:
    """The object's interior: the foreground eroded by one pixel (3x3), so an edge's blend with the background is not
    counted; empty where the foreground is under MIN_FG_FRACTION (no object)."""
    from scipy.ndimage import binary_erosion
    mask = foreground_mask(rgb)
    if mask.mean() < MIN_FG_FRACTION:
        return np.zeros_like(mask)
    return binary_erosion(mask, structure=np.ones((3, 3), bool), border_value=0)


def marking_share(image: torch.Tensor, marking: RGB, colour: RGB) -> float:
    """The share of the object's interior (`object_interior`) nearer the marking than the main `colour` and within
    MARKING_TOLERANCE of it (0 without an interior)."""
    rgb = to_rgb255(image)
    inner = object_interior(rgb)
    if not inner.any():
        return 0.0
    to_marking = np.linalg.norm(rgb[inner] - np.asarray(marking, np.float32), axis=-1)
    to_colour = np.linalg.norm(rgb[inner] - np.asarray(colour, np.float32), axis=-1)
    return float(((to_marking < to_colour) & (to_marking <= MARKING_TOLERANCE)).mean())


def reference_marking_share(references: list[torch.Tensor], marking: RGB, colour: RGB, px: int) -> float:
    """The references' mean marking share, resized (area) to `px`, the generated images' size."""
    return float(np.mean([marking_share(F.interpolate(r[None], size=(px, px), mode="area")[0], marking, colour)
                          for r in references]))


def marking_present(image: torch.Tensor, marking: RGB, colour: RGB, reference_share: float) -> float:
    return float(marking_share(image, marking, colour) >= MARKING_SHARE_OF_REFERENCES * reference_share)


def subject_recognised(image: torch.Tensor, shape: str, colour: RGB, background: str,
                       marking: RGB | None = None, reference_share: float = 0.0) -> bool:
    """The demo's per-picture verdict: the foreground is nearest the subject's shape of the 10 scene shapes, in the
    subject's colour, on the prompted background (all three of `nearest_shape`, `colour_agreement`,
    `background_match`), and with a `marking`, it is present (`marking_present` against the references' share)."""
    return (nearest_shape(image) == shape and colour_agreement(image, colour) > 0
            and background_match(image, background) > 0
            and (marking is None or marking_present(image, marking, colour, reference_share) > 0))


def t95(df: int) -> float:
    """Two-sided 95% Student-t quantile (1.96 as df -> inf; 4.30 at df 2): small samples, e.g. a few study units."""
    from scipy.stats import t
    return float(t.ppf(0.975, df))


def mean_ci(values) -> dict:
    v = np.asarray(list(values), np.float64)
    if v.size == 0:
        return {"mean": float("nan"), "ci95": float("nan"), "n": 0}
    half = t95(v.size - 1) * v.std(ddof=1) / math.sqrt(v.size) if v.size > 1 else float("nan")
    return {"mean": round(float(v.mean()), 4), "ci95": round(float(half), 4), "n": int(v.size)}


def score_images(images: list[torch.Tensor], backgrounds: list[str], references: list[torch.Tensor],
                 colour: RGB, shape: str | None = None, marking: RGB | None = None) -> dict:
    """Per-image scores -> {metric: mean_ci} for generated images of one subject (one method). With the subject's
    `shape` also "subject_shape" (nearest of the scene shapes) and "recognised" (`subject_recognised`, from the
    same per-image checks; "shape_colour_background", the verdict without the marking); with its `marking` also
    "marking_ok" (`marking_present`), which "recognised" then requires."""
    emb = SubjectEmbedder()
    ref_mask = reference_mask(references)
    per = {"subject_sim": [subject_similarity(im, references, emb) for im in images],
           "colour_ok": [colour_agreement(im, colour) for im in images],
           "shape_iou": [shape_iou(im, ref_mask) for im in images],
           "background_ok": [background_match(im, bg) for im, bg in zip(images, backgrounds)]}
    if shape is not None:
        per["subject_shape"] = [float(nearest_shape(im) == shape) for im in images]
        per["shape_colour_background"] = [float(s > 0 and c > 0 and b > 0) for s, c, b in
                                          zip(per["subject_shape"], per["colour_ok"], per["background_ok"])]
        marked = [1.0] * len(images)
        if marking is not None:
            share = reference_marking_share(references, marking, colour, images[0].shape[-1])
            per["marking_ok"] = marked = [marking_present(im, marking, colour, share) for im in images]
        per["recognised"] = [float(u > 0 and m > 0) for u, m in zip(per["shape_colour_background"], marked)]
    return {"per_image": per, **{k: mean_ci(v) for k, v in per.items()}}
