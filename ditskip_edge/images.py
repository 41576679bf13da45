"""The user's photos: read, check, normalise to the data resolution.

A photo is resized (Lanczos, aspect ratio kept) so that its short side is the data resolution s_max, if it is
larger; a smaller photo is kept as it is and its crops are clamped to its short side (reported as a warning).
Pixels are float32 in [-1, 1], [3, H, W].
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from .runtime.errors import UserError

log = logging.getLogger(__name__)
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}
MAX_PHOTOS = 200                  # photos of one subject (DreamBooth uses 3-6)
MAX_PHOTO_PIXELS = 64_000_000     # a larger file is refused before it is decoded (decompression bombs)


@dataclass
class Photo:
    name: str
    pixels: torch.Tensor          # [3, H, W] float32 in [-1, 1]
    original_hw: tuple[int, int]  # the file's size, before normalisation

    @property
    def short_side_px(self) -> int:
        return int(min(self.pixels.shape[1:]))


def load_photos(folder: str | Path, data_px: int) -> list[Photo]:
    folder = Path(folder)
    if not folder.exists():
        raise UserError(f"images folder {folder} does not exist")
    if not folder.is_dir():
        raise UserError(f"images folder {folder} is not a folder")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise UserError(f"images folder {folder} is empty: expected photos ({', '.join(sorted(IMAGE_SUFFIXES))})")
    if len(files) > MAX_PHOTOS:
        raise UserError(f"images folder {folder} has {len(files)} files: at most {MAX_PHOTOS} photos")
    photos = []
    for f in files:
        if f.suffix.lower() not in IMAGE_SUFFIXES:
            raise UserError(f"{f}: not an image file (expected one of {', '.join(sorted(IMAGE_SUFFIXES))})")
        try:
            with Image.open(f) as im:
                w, h = im.size
                if w * h > MAX_PHOTO_PIXELS:
                    raise UserError(f"{f}: {w}x{h} px is beyond {MAX_PHOTO_PIXELS // 1_000_000} megapixels")
                im = im.convert("RGB")
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as e:
            raise UserError(f"{f}: cannot be read as an image ({e})") from e
        photos.append(Photo(f.name, normalise(im, data_px), (h, w)))
    return photos


def normalise(im: Image.Image, data_px: int) -> torch.Tensor:
    w, h = im.size
    short = min(w, h)
    if short > data_px:
        scale = data_px / short
        im = im.resize((max(data_px, round(w * scale)), max(data_px, round(h * scale))), Image.LANCZOS)
    arr = np.asarray(im, dtype=np.float32) / 127.5 - 1.0
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous()


def to_uint8_image(pixels: torch.Tensor) -> Image.Image:
    """[3, H, W] in [-1, 1] -> PIL image."""
    arr = ((pixels.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).numpy()
    return Image.fromarray(arr)
