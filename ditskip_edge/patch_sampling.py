"""Timestep-aware dynamic patch sampling (PAPER.md section 1).

Crop side for diffusion time t in [0, 1]:  s(t) = s_min + t * (s_max - s_min), rounded to the model's pixel
multiple and clamped to [s_min, short side of the photo]. Placement: uniform over the integer positions that keep
the crop inside the photo. The crop is resized to s_min x s_min.

`runtime/schedule.py` (`crop_side_px`, `place_crop`) decides the crop box when the schedule is made; `PatchSampler`
cuts and resizes it. PatchSampler is a torch module with a static output shape whose crop box is tensor data, so it
exports to the device runtimes: it builds a sampling grid from the box and calls grid_sample (bilinear). The grid
is built from tensors only (no affine_grid, which ONNX only has from opset 20).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class PatchSampler(nn.Module):
    """image [1, 3, H, W], crop_box [3] = (x0_px, y0_px, side_px) float32 -> patch [1, 3, out_px, out_px].

    Output pixel i samples source pixel coordinate x0 + (i + 0.5) * side / out - 0.5 (pixel centres), i.e. the crop
    resized with bilinear interpolation (no antialiasing). With side == out the patch is the exact pixel crop.
    """

    def __init__(self, out_px: int):
        super().__init__()
        self.out_px = int(out_px)
        self.register_buffer("centres", (torch.arange(self.out_px, dtype=torch.float32) + 0.5) / self.out_px,
                             persistent=False)

    def forward(self, image: torch.Tensor, crop_box: torch.Tensor) -> torch.Tensor:
        h, w = image.shape[-2], image.shape[-1]
        x0, y0, side = crop_box[0:1], crop_box[1:2], crop_box[2:3]
        src_x = x0 + self.centres * side - 0.5              # [out] source pixel coordinates
        src_y = y0 + self.centres * side - 0.5
        gx = (2 * src_x + 1) / w - 1                         # normalised, align_corners=False
        gy = (2 * src_y + 1) / h - 1
        n = self.out_px
        grid = torch.stack([gx.reshape(1, 1, n).expand(1, n, n), gy.reshape(1, n, 1).expand(1, n, n)], dim=-1)
        return F.grid_sample(image, grid, mode="bilinear", padding_mode="border", align_corners=False)
