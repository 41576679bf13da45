"""The user's photos: read, check, normalise to the data resolution. numpy + Pillow: the host compiler and the
device's subject stage (runtime/subject.py) use this one implementation, so both see the same pixels.

A photo is resized (Pillow's Lanczos, aspect ratio kept) so that its short side is the data resolution s_max, if it
is larger; a smaller photo is kept as it is and its crops are clamped to its short side (reported as a warning).
Pixels are float32 in [-1, 1], [3, H, W] (v / 127.5 - 1 of the 8-bit RGB values), so writing them back as an 8-bit
PNG (`to_uint8`) and reading that again gives the same floats.

Refused with one line (UserError) before any work: a missing, empty or oversized folder, a file that is not an
image or cannot be decoded, a photo beyond MAX_PHOTO_PIXELS, fewer photos than asked for.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import UserError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".bmp"}
MAX_PHOTOS = 200                  # photos of one subject (DreamBooth uses 3-6)
MAX_PHOTO_PIXELS = 64_000_000     # a larger file is refused before it is decoded (decompression bombs)
CAPTION_SUFFIX = ".txt"           # a photo's caption beside it: dog1.jpg + dog1.txt (compile --photo-captions)


@dataclass
class PhotoPixels:
    name: str                     # file name in the folder
    pixels: np.ndarray            # [3, H, W] float32 in [-1, 1], normalised to the data resolution
    original_hw: tuple[int, int]  # the file's size, before normalisation
    sha256: str                   # of the file's bytes (what a resumed subject stage checks it was given)

    @property
    def hw(self) -> tuple[int, int]:
        return int(self.pixels.shape[1]), int(self.pixels.shape[2])


def photo_files(folder: str | Path, min_photos: int = 1, captions: bool = False) -> list[Path]:
    """The photos in `folder`, sorted by name. `captions`: the folder also holds each photo's caption as a text file of
    the same name (`dog1.jpg` + `dog1.txt`, as kohya-style trainers read them), which are not photos."""
    folder = Path(folder)
    if not folder.exists():
        raise UserError(f"images folder {folder} does not exist")
    if not folder.is_dir():
        raise UserError(f"images folder {folder} is not a folder")
    entries = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    texts = [p for p in entries if captions and p.suffix.lower() == CAPTION_SUFFIX]
    files = [p for p in entries if p not in texts]
    if not files:
        raise UserError(f"images folder {folder} is empty: expected photos ({', '.join(sorted(IMAGE_SUFFIXES))})")
    if len(files) > MAX_PHOTOS:
        raise UserError(f"images folder {folder} has {len(files)} files: at most {MAX_PHOTOS} photos")
    if len(files) < min_photos:
        raise UserError(f"images folder {folder} has {len(files)} photo{'s' if len(files) != 1 else ''}: this bundle "
                        f"needs at least {min_photos}")
    for f in files:
        if f.suffix.lower() not in IMAGE_SUFFIXES:
            hint = ("; captions beside the photos are read by compile --photo-captions"
                    if f.suffix.lower() == CAPTION_SUFFIX else "")
            raise UserError(f"{f}: not an image file (expected one of {', '.join(sorted(IMAGE_SUFFIXES))}{hint})")
    if captions:
        stems = {f.stem for f in files}
        stray = [t.name for t in texts if t.stem not in stems]
        if stray:
            raise UserError(f"images folder {folder}: caption {stray[0]} names no photo (a caption is <photo name>"
                            f"{CAPTION_SUFFIX})")
    return files


def read_captions(files: list[Path], max_chars: int) -> list[str]:
    """Each photo's caption: the text file of the same name beside it (UTF-8, surrounding whitespace dropped), in
    the photos' order. Refused with one line: a photo without one, an empty or over-long or undecodable caption."""
    out = []
    for f in files:
        t = f.with_suffix(CAPTION_SUFFIX)
        if not t.is_file():
            raise UserError(f"{f}: no caption {t.name} beside it (--photo-captions: every photo needs one)")
        try:
            text = t.read_bytes().decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise UserError(f"{t}: not UTF-8 text ({e.reason} at byte {e.start})") from e
        if not text:
            raise UserError(f"{t}: the caption is empty")
        if len(text) > max_chars:
            raise UserError(f"{t}: the caption has {len(text)} characters: at most {max_chars}")
        out.append(text)
    return out


def load_photos(folder: str | Path, data_px: int, min_photos: int = 1, captions: bool = False) -> list[PhotoPixels]:
    """Every photo in `folder` (sorted by name), turned upright by its EXIF orientation, normalised to `data_px` (the
    short side, when larger). `captions`: caption text files beside the photos are allowed (photo_files)."""
    from PIL import Image, ImageOps, UnidentifiedImageError
    photos = []
    for f in photo_files(folder, min_photos, captions):
        raw = f.read_bytes()
        try:
            with Image.open(f) as im:
                w, h = im.size
                if w * h > MAX_PHOTO_PIXELS:
                    raise UserError(f"{f}: {w}x{h} px is beyond {MAX_PHOTO_PIXELS // 1_000_000} megapixels")
                # upright as the camera meant it (a phone's EXIF orientation tag), as the apps' decoders show it
                im = ImageOps.exif_transpose(im).convert("RGB")
                w, h = im.size
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError, SyntaxError, ValueError) as e:
            raise UserError(f"{f}: cannot be read as an image ({type(e).__name__}: {e})") from e
        photos.append(PhotoPixels(f.name, normalise(im, data_px), (h, w), hashlib.sha256(raw).hexdigest()))
    return photos


def normalise(im, data_px: int) -> np.ndarray:
    """PIL RGB image -> [3, H, W] float32 in [-1, 1], short side Lanczos-resized to data_px when larger."""
    from PIL import Image
    w, h = im.size
    short = min(w, h)
    if short > data_px:
        scale = data_px / short
        im = im.resize((max(data_px, round(w * scale)), max(data_px, round(h * scale))), Image.LANCZOS)
    arr = np.asarray(im, dtype=np.float32) / 127.5 - 1.0
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def to_uint8(pixels: np.ndarray) -> np.ndarray:
    """[3, H, W] in [-1, 1] -> [H, W, 3] uint8 (what a PNG stores)."""
    arr = np.round((np.clip(pixels, -1.0, 1.0) + 1.0) * 127.5).astype(np.uint8)
    return np.ascontiguousarray(arr.transpose(1, 2, 0))


def save_png(pixels: np.ndarray, path: Path) -> None:
    from PIL import Image
    Image.fromarray(to_uint8(pixels)).save(path)


def read_png(path: Path) -> np.ndarray:
    """A bundle's normalised photo -> [3, H, W] float32 in [-1, 1]."""
    from PIL import Image
    with Image.open(path) as im:
        arr = np.asarray(im.convert("RGB"), dtype=np.float32) / 127.5 - 1.0
    return np.ascontiguousarray(arr.transpose(2, 0, 1))
