"""Pixel (un)shuffles traced as row-major reshapes, for ExecuTorch's portable kernels.

torch's decomposition of `pixel_unshuffle` / `pixel_shuffle` ends in a copy to channels_last
(`aten.clone(memory_format=torch.channels_last)`), and ExecuTorch keeps that dim order: SANA's DC-AE then adds a
channels_last tensor to a contiguous one in its down block's shortcut, which the portable `add` refuses at run time
("3 input tensors have different dim orders", found on the published DC-AE f32c32 config's encoder; XNNPACK took those
ops and hid it). Inside `contiguous_pixel_shuffles()` every F.pixel_shuffle / F.pixel_unshuffle call is the same data
movement as reshape -> permute -> reshape, whose result is contiguous: the values are identical.

    with contiguous_pixel_shuffles():
        ep = torch.export.export(module, example)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def pixel_unshuffle_rowmajor(x: torch.Tensor, r: int) -> torch.Tensor:
    """[.., C, H, W] -> [.., C r^2, H / r, W / r], F.pixel_unshuffle's element order."""
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    n = len(lead)
    y = y.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return y.reshape(*lead, c * r * r, h // r, w // r)


def pixel_shuffle_rowmajor(x: torch.Tensor, r: int) -> torch.Tensor:
    """[.., C r^2, H, W] -> [.., C, H r, W r], F.pixel_shuffle's element order."""
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    y = y.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


class _RowMajorShuffles(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.pixel_unshuffle or func is torch.pixel_unshuffle:
            return pixel_unshuffle_rowmajor(*args, **kwargs)
        if func is F.pixel_shuffle or func is torch.pixel_shuffle:
            return pixel_shuffle_rowmajor(*args, **kwargs)
        return func(*args, **kwargs)


def contiguous_pixel_shuffles():
    return _RowMajorShuffles()
