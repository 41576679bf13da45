"""Dynamic patch sampling's crop-and-resize on the device, numpy only: the twin of ditskip_edge/patch_sampling.py's
PatchSampler (which is torch's grid_sample, bilinear, border padding, align_corners=False).

    crop_patch(photo [3, H, W], (x0_px, y0_px, side_px), out_px) -> patch [1, 3, out_px, out_px] float32

Output pixel i samples the source coordinate x0 + (i + 0.5) * side / out - 0.5 (pixel centres; with side == out the
patch is the exact pixel crop), bilinear between the two nearest source pixels, coordinates clamped to the image
(border padding). The arithmetic follows PatchSampler's float32 steps (centres, normalised grid, grid_sample's
unnormalisation), so the two agree to float32 rounding (~1e-6). The grid is separable (column coordinates depend on
the output column only), so the patch is two gathers with two taps each.

Photos have arbitrary sizes on a phone and programs have static shapes: the device cuts and resizes each crop here
and the static-shape `encode` program maps the patch to the clean latents x0.
"""

from __future__ import annotations

import numpy as np


def _taps(start: float, side: float, size: int, out_px: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Source indices (lo, hi) and the distances (1 - frac, frac) of the out_px samples along one axis of `size`."""
    f32 = np.float32
    centres = (np.arange(out_px, dtype=f32) + f32(0.5)) / f32(out_px)
    src = f32(start) + centres * f32(side) - f32(0.5)                     # PatchSampler: x0 + centres * side - 0.5
    g = (f32(2) * src + f32(1)) / f32(size) - f32(1)                       # normalised, align_corners=False (float32)
    ix = (((g.astype(np.float64) + 1.0) * size - 1.0) / 2.0).astype(f32)  # grid_sample's unnormalisation, one rounding
    ix = np.clip(ix, f32(0), f32(size - 1))                                # border padding
    lo = np.floor(ix)
    frac = (ix - lo).astype(f32)
    lo_i = lo.astype(np.int64)
    hi_i = np.minimum(lo_i + 1, size - 1)          # a tap past the border has weight 0 (ix == size - 1 exactly)
    return lo_i, hi_i, (f32(1) - frac).astype(f32), frac


def crop_patch(photo: np.ndarray, crop_box, out_px: int) -> np.ndarray:
    """photo [3, H, W] (or [1, 3, H, W]) float32, crop_box (x0_px, y0_px, side_px) -> [1, 3, out_px, out_px]."""
    img = np.asarray(photo, dtype=np.float32)
    if img.ndim == 4:
        img = img[0]
    _, h, w = img.shape
    x0, y0, side = (float(v) for v in crop_box)
    yn, ys, s, n = _taps(y0, side, h, out_px)          # north/south rows; s = distance to south, n = to north
    xw, xe, e, wt = _taps(x0, side, w, out_px)         # west/east columns
    # grid_sample's bilinear: nw = s e, ne = s w, sw = n e, se = n w; sum nw + ne + sw + se (its order)
    nw, ne, sw, se = s[:, None] * e[None], s[:, None] * wt[None], n[:, None] * e[None], n[:, None] * wt[None]
    rows_n, rows_s = img[:, yn, :], img[:, ys, :]                                          # [3, out, W]
    out = (rows_n[:, :, xw] * nw + rows_n[:, :, xe] * ne) + rows_s[:, :, xw] * sw + rows_s[:, :, xe] * se
    return np.ascontiguousarray(out[None], dtype=np.float32)
