"""The user's photos on the host: the runtime's reader (runtime/photos.py: read, check, normalise to the data
resolution with Pillow's Lanczos) with the pixels as torch tensors [3, H, W] float32 in [-1, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from .runtime import photos as runtime_photos
from .runtime.photos import IMAGE_SUFFIXES, MAX_PHOTO_PIXELS, MAX_PHOTOS  # noqa: F401  (the limits, one place)


@dataclass
class Photo:
    name: str
    pixels: torch.Tensor          # [3, H, W] float32 in [-1, 1]
    original_hw: tuple[int, int]  # the photo's size upright (EXIF orientation applied), before normalisation

    @property
    def short_side_px(self) -> int:
        return int(min(self.pixels.shape[1:]))


def load_photos(folder: str | Path, data_px: int, captions: bool = False) -> list[Photo]:
    return [Photo(p.name, torch.from_numpy(p.pixels), p.original_hw)
            for p in runtime_photos.load_photos(folder, data_px, captions=captions)]


def normalise(im: Image.Image, data_px: int) -> torch.Tensor:
    return torch.from_numpy(runtime_photos.normalise(im, data_px))


def to_uint8_image(pixels: torch.Tensor) -> Image.Image:
    """[3, H, W] in [-1, 1] -> PIL image."""
    return Image.fromarray(runtime_photos.to_uint8(pixels.detach().cpu().numpy()))
