"""The native core's photo input (device_runtime/src/subject/photo_*) against photos.py load_photos (Pillow 13).

Properties protected, each compared with ditskip_edge/runtime/photos.py:
- the normalised pixels ([3, H, W] float32) are load_photos' bit for bit: Pillow's Lanczos resize of the short side
  to data_px (odd, prime, 4:3, 3:4, 16:9, 1:5 sizes, just above data_px, large reductions) and the kept size of a
  photo not larger; the names (sorted, hidden files skipped), original and normalised sizes and SHA-256 of the file;
- the lanczos resize alone equals Pillow's Image.resize(..., LANCZOS) on random size pairs, up- and downscaling;
- Pillow's convert("RGB") of RGBA, LA, grey, palette (with transparency), 1-bit, 16-bit grey (clamped) and 16-bit
  RGB PNGs, 24 / 32-bit and palette BMPs; JPEGs (4:4:4, 4:2:2, 4:2:0, progressive, grey) decoded with libjpeg-turbo
  to Pillow's exact pixels;
- the 8 EXIF orientations (exif_transpose) on JPEGs in both byte orders, on a PNG's eXIf chunk and a JPEG's XMP;
- every refusal of photo_files / load_photos word for word (missing, not a folder, empty, too many, too few, not an
  image suffix, undecodable content, a header beyond MAX_PHOTO_PIXELS); a truncated JPEG with photos.py's prefix;
- save_photo_png writes what photos.py save_png writes (Pillow reads the same pixels), rounding ties to even;
- the arm64 build under qemu gives the x86-64 build's bytes.

The checker (device_runtime/tests/photo_check.cpp) is the CMake target `make native` / `make native-arm64` build.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from ditskip_edge.runtime import photos as py_photos
from ditskip_edge.runtime.errors import UserError


@pytest.fixture(scope="module")
def checker(runner) -> Path:
    return runner.binary.parent / "photo_check"


def run(argv: list, ok: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(a) for a in argv], capture_output=True, timeout=300)
    if ok:
        assert out.returncode == 0, out.stderr.decode(errors="replace")
    return out


def native_load(checker, folder: Path, data_px: int, min_photos: int, out: Path, prefix: list | None = None):
    r = run([*(prefix or []), checker, "load", folder, data_px, min_photos, out])
    listed = json.loads(r.stdout)
    return listed, [(out / f"{i}.f32").read_bytes() for i in range(len(listed))]


def assert_equal_to_python(checker, folder: Path, data_px: int, min_photos: int = 1) -> list:
    listed, pixels = native_load(checker, folder, data_px, min_photos, folder.parent / (folder.name + "-out"))
    expect = py_photos.load_photos(folder, data_px, min_photos)
    assert [p["name"] for p in listed] == [p.name for p in expect]
    for got, raw, want in zip(listed, pixels, expect):
        assert tuple(got["original_hw"]) == want.original_hw, want.name
        assert tuple(got["hw"]) == want.hw, want.name
        assert got["sha256"] == want.sha256, want.name
        assert raw == want.pixels.tobytes(), (want.name, _diff(raw, want.pixels))
    return listed


def _diff(raw: bytes, want: np.ndarray) -> str:
    if len(raw) != want.nbytes:
        return f"{len(raw)} bytes, expected {want.nbytes}"
    got = np.frombuffer(raw, np.float32).reshape(want.shape)
    d = np.abs(got - want) * 127.5
    return f"{int((d > 0).sum())} values differ, by up to {d.max():.0f} levels"


def picture(h: int, w: int, seed: int) -> np.ndarray:
    """[h, w, 3] uint8: gradients, noise and hard black / white edges (Lanczos overshoots there: clamping)."""
    rnd = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    a = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)), (xx * 7 + yy * 13) % 256], -1)
    a = (a + rnd.integers(-20, 21, a.shape)).clip(0, 255).astype(np.uint8)
    a[h // 3: h // 2, :] = 255
    a[:, w // 4: w // 3] = 0
    return a


def save(a: np.ndarray, path: Path, **kw) -> Path:
    from PIL import Image
    Image.fromarray(a).save(path, **kw)
    return path


def raw_png(w: int, h: int, color_type: int, depth: int, rows: list[bytes], extra: bytes = b"") -> bytes:
    """A PNG written by hand (Pillow writes no 16-bit RGB): filter 0 on every row."""
    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0)
    data = zlib.compress(b"".join(b"\0" + r for r in rows))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", data) + chunk(b"IEND", b"")


# ------------------------------------------------------------------------------------------------- resize, PNG

SIZES = [(37, 53), (64, 64), (63, 200), (65, 64), (64, 65), (101, 97), (97, 101), (480, 640), (640, 480),
         (360, 640), (640, 360), (100, 500), (500, 100), (1499, 2003), (66, 1000), (131, 127)]   # (h, w)


def test_png_photos_of_many_sizes_are_pillows_lanczos_bit_for_bit(checker, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for i, (h, w) in enumerate(SIZES):
        save(picture(h, w, i), folder / f"p{i:02d}_{h}x{w}.png")
    (folder / ".hidden.png").write_bytes(b"not read")
    (folder / "sub.png").mkdir()                                  # a folder is not a photo
    listed = assert_equal_to_python(checker, folder, 64)
    assert len(listed) == len(SIZES)
    kept = {tuple(p["hw"]) for p in listed if p["hw"] == p["original_hw"]}
    assert {(37, 53), (64, 64), (63, 200)} <= kept                # the path without a resize is covered too
    assert_equal_to_python(checker, folder, 96)                   # another data resolution, other windows


def test_lanczos_resize_is_pillows_on_random_size_pairs(checker, tmp_path):
    from PIL import Image
    rnd = np.random.default_rng(7)
    pairs = [tuple(int(v) for v in rnd.integers(1, 300, 2)) + tuple(int(v) for v in rnd.integers(1, 400, 2))
             for _ in range(24)]                                  # (w, h, out_w, out_h): up- and downscaling
    pairs += [(w, h, w, oh) for w, h, _, oh in pairs[:3]]         # one axis alone
    # Pillow 13 filters vertically first when the height loses more than twice the width's pixels: either side
    pairs += [(90, 200, 60, 140), (90, 200, 60, 139), (90, 200, 60, 141), (100, 500, 64, 320), (500, 100, 320, 64),
              (60, 300, 200, 100), (300, 60, 100, 200)]
    for k, (w, h, ow, oh) in enumerate(pairs):
        a = picture(h, w, k)
        (tmp_path / "in.rgb").write_bytes(a.tobytes())
        run([checker, "resize", tmp_path / "in.rgb", w, h, ow, oh, tmp_path / "out.rgb"])
        expect = np.asarray(Image.fromarray(a).resize((ow, oh), Image.LANCZOS))
        assert (tmp_path / "out.rgb").read_bytes() == expect.tobytes(), (w, h, ow, oh)


def test_png_and_bmp_modes_convert_to_rgb_as_pillow(checker, tmp_path):
    from PIL import Image
    folder = tmp_path / "modes"
    folder.mkdir()
    a = picture(90, 70, 3)
    rgba = np.concatenate([a, picture(90, 70, 4)[..., :1]], -1)
    save(rgba, folder / "rgba.png")
    save(rgba[..., [0, 3]], folder / "grey_alpha.png")
    save(a[..., 1], folder / "grey.png")
    Image.fromarray(a).quantize(colors=60).save(folder / "palette.png")
    Image.fromarray(a).quantize(colors=30).save(folder / "palette_trns.png", transparency=3)
    Image.fromarray(a[..., 0] > 127).save(folder / "one_bit.png")
    grey16 = (picture(50, 40, 5)[..., 0].astype(np.uint16) * 3)   # values beyond 255: Pillow clamps I;16 -> RGB
    (folder / "grey16.png").write_bytes(raw_png(40, 50, 0, 16, [r.astype(">u2").tobytes() for r in grey16]))
    rgb16 = picture(50, 40, 6).astype(np.uint16) * 257 + np.arange(40, dtype=np.uint16)[None, :, None]
    (folder / "rgb16.png").write_bytes(raw_png(40, 50, 2, 16, [r.astype(">u2").tobytes() for r in rgb16]))
    save(a, folder / "rgb24.bmp")
    save(rgba, folder / "rgba32.bmp")
    Image.fromarray(a).quantize(colors=40).save(folder / "palette8.bmp")
    assert {Image.open(p).mode for p in folder.iterdir()} >= {"RGBA", "LA", "L", "P", "1", "I;16", "RGB"}
    assert_equal_to_python(checker, folder, 32)                   # resized
    assert_equal_to_python(checker, folder, 128)                  # as they are


def test_jpegs_decode_to_pillows_pixels(checker, tmp_path):
    folder = tmp_path / "jpegs"
    folder.mkdir()
    for i, (h, w, sub, q, prog) in enumerate([(53, 37, 0, 95, False), (48, 64, 1, 80, False), (77, 101, 2, 90, False),
                                              (17, 33, 2, 60, True), (480, 640, 2, 85, False),
                                              (121, 67, 1, 92, True)]):
        save(picture(h, w, 10 + i), folder / f"j{i}.jpg", quality=q, subsampling=sub, progressive=prog)
    save(picture(45, 61, 20)[..., 0], folder / "grey.jpeg")
    assert_equal_to_python(checker, folder, 40)
    assert_equal_to_python(checker, folder, 1000)


# ------------------------------------------------------------------------------------------------------- EXIF

def _exif_block(orientation: int, big_endian: bool) -> bytes:
    e = ">" if big_endian else "<"
    value = struct.pack(e + "H", orientation) + b"\0\0"
    ifd = struct.pack(e + "H", 2) + struct.pack(e + "HHI", 0x010F, 2, 4) + struct.pack(e + "I", 38)
    ifd += struct.pack(e + "HHI", 0x0112, 3, 1) + value + struct.pack(e + "I", 0)
    return b"Exif\0\0" + (b"MM\0*" if big_endian else b"II*\0") + struct.pack(e + "I", 8) + ifd + b"Cam\0"


def test_every_exif_orientation_turns_the_photo_as_exif_transpose(checker, tmp_path):
    from PIL import Image
    folder = tmp_path / "exif"
    folder.mkdir()
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        save(picture(60, 90, 30 + o), folder / f"o{o}_little.jpg", quality=95, exif=exif)   # Pillow: II
        save(picture(70, 45, 40 + o), folder / f"o{o}_big.jpg", quality=90, exif=_exif_block(o, True))
    for o in (3, 6, 8):
        exif = Image.Exif()
        exif[0x0112] = o
        save(picture(40, 50, 50 + o), folder / f"o{o}_png.png", exif=exif)               # the eXIf chunk
    xmp = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
    save(picture(30, 52, 60), folder / "xmp6.jpg", quality=90, xmp=xmp)
    upright = Image.Exif()
    upright[0x0112] = 1
    save(picture(30, 52, 61), folder / "exif1_xmp6.jpg", quality=90, xmp=xmp, exif=upright)   # EXIF wins
    no_tag = Image.Exif()
    no_tag[0x010F] = "Cam"
    save(picture(30, 52, 62), folder / "xmp8_element.jpg", quality=90, exif=no_tag,
         xmp=b"<x:xmpmeta><tiff:Orientation>8</tiff:Orientation></x:xmpmeta>")
    from PIL.PngImagePlugin import PngInfo
    info = PngInfo()
    info.add_itxt("XML:com.adobe.xmp", xmp.decode())
    save(picture(30, 52, 63), folder / "xmp6_itxt.png", pnginfo=info)
    listed = assert_equal_to_python(checker, folder, 24)          # turned, then resized
    turned = {p["name"]: p["original_hw"] for p in listed}
    assert turned["o6_little.jpg"] == [90, 60] and turned["o1_little.jpg"] == [60, 90]
    assert turned["xmp6.jpg"] == turned["xmp8_element.jpg"] == turned["xmp6_itxt.png"] == [52, 30]
    assert turned["exif1_xmp6.jpg"] == [30, 52]
    assert_equal_to_python(checker, folder, 512)                  # turned, kept


# --------------------------------------------------------------------------------------------------- refusals

def _refusals(checker, folder, data_px: int = 64, min_photos: int = 1) -> tuple[str, str]:
    with pytest.raises(UserError) as e:
        py_photos.load_photos(folder, data_px, min_photos)
    out = run([checker, "load", folder, data_px, min_photos, Path(folder).parent / "refused-out"], ok=False)
    err = out.stderr.decode()
    assert out.returncode == 2, (out.returncode, err)
    assert len(err.strip().splitlines()) == 1, err
    return err.strip(), str(e.value)


def test_refusals_are_photos_py_messages_word_for_word(checker, tmp_path):
    def folder(name: str, files: dict) -> Path:
        d = tmp_path / name
        d.mkdir()
        for f, data in files.items():
            (d / f).write_bytes(data)
        return d
    png = io.BytesIO()
    from PIL import Image
    Image.fromarray(picture(8, 8, 0)).save(png, format="PNG")
    good = png.getvalue()
    bomb = raw_png(8001, 8000, 2, 8, [])[:33] + b"\0\0\0\0IEND\xaeB`\x82"   # the header claims 64.008 Mpx
    cases = [
        (tmp_path / "missing", 1),
        (folder("file_not_folder_parent", {"a.png": good}) / "a.png", 1),
        (folder("empty", {".hidden.png": good}), 1),
        (folder("too_many", {f"{i:03d}.png": good for i in range(201)}), 1),
        (folder("too_few", {"a.png": good, "b.png": good}), 3),
        (folder("one_too_few", {"a.png": good}), 2),
        (folder("caption", {"a.png": good, "a.txt": b"a dog"}), 1),
        (folder("gif_suffix", {"a.gif": good}), 1),
        (folder("garbage", {"a.png": good, "b.jpg": b"\xff\xd8 not a jpeg at all"}), 1),
        (folder("noise", {"c.png": b"\x89PNG\r\n\x1a\n" + bytes(range(60))}), 1),
        (folder("bomb", {"a.png": good, "big.png": bomb}), 1),
        (str(tmp_path / "empty") + "//", 1),                      # Path() normalises the folder as it prints it
    ]
    for path, min_photos in cases:
        native, python = _refusals(checker, path, 64, min_photos)
        assert native == python, path
    # truncated data: the same one-line prefix (the exception's words are Pillow's own)
    jpg = io.BytesIO()
    Image.fromarray(picture(64, 64, 1)).save(jpg, format="JPEG", quality=90)
    cut = folder("truncated", {"t.jpg": jpg.getvalue()[: len(jpg.getvalue()) // 2]})
    native, python = _refusals(checker, cut)
    prefix = f"{cut / 't.jpg'}: cannot be read as an image ("
    assert native.startswith(prefix) and python.startswith(prefix), (native, python)


def test_webp_is_refused_naming_the_format(checker, tmp_path):
    """Documented difference (photo_decode.h): Pillow reads WebP, the device asks for JPEG or PNG."""
    folder = tmp_path / "webp"
    folder.mkdir()
    save(picture(20, 20, 0), folder / "a.webp")
    out = run([checker, "load", folder, 64, 1, tmp_path / "o"], ok=False)
    assert out.returncode == 2
    assert out.stderr.decode().strip() == (f"{folder / 'a.webp'}: cannot be read as an image (WebP is not decoded "
                                           "on the device: save the photo as JPEG or PNG)")


# ------------------------------------------------------------------------------------------------------- save

def test_saved_png_reads_back_as_photos_py_save_png(checker, tmp_path):
    from PIL import Image
    rnd = np.random.default_rng(3)
    h, w = 23, 31
    pixels = rnd.uniform(-1.3, 1.3, (3, h, w)).astype(np.float32)
    ties = (np.arange(256, dtype=np.float32) + 0.5) / np.float32(127.5) - np.float32(1.0)   # (p + 1) * 127.5 = k + .5
    pixels.reshape(-1)[: ties.size] = ties
    pixels.reshape(-1)[ties.size: ties.size + 4] = [-1.0, 1.0, 0.0, -0.0]
    (tmp_path / "p.f32").write_bytes(pixels.tobytes())
    run([checker, "save", tmp_path / "p.f32", h, w, tmp_path / "native.png"])
    py_photos.save_png(pixels, tmp_path / "python.png")
    native = np.asarray(Image.open(tmp_path / "native.png"))
    assert Image.open(tmp_path / "native.png").mode == "RGB"
    assert np.array_equal(native, np.asarray(Image.open(tmp_path / "python.png")))
    assert np.array_equal(native, py_photos.to_uint8(pixels))
    assert not (tmp_path / "native.png.tmp").exists()


# ------------------------------------------------------------------------------------------------------ arm64

def test_arm64_build_loads_the_same_photos_and_refuses_alike(checker, arm64_runner, tmp_path):
    """The same sources cross-built for aarch64 and run under qemu (libm's sin of another target, no FMA): a resized
    PNG, an EXIF-turned resized JPEG and a palette PNG give the x86-64 build's bytes (= Pillow's), and a refusal its
    line."""
    from PIL import Image
    from device_tests.native_runtime import QEMU
    arm = arm64_runner.binary.parent / "photo_check"
    folder = tmp_path / "arm"
    folder.mkdir()
    save(picture(97, 131, 1), folder / "a.png")
    exif = Image.Exif()
    exif[0x0112] = 6
    save(picture(120, 90, 2), folder / "b.jpg", quality=90, exif=exif)
    Image.fromarray(picture(70, 66, 3)).quantize(colors=50).save(folder / "c.png")
    listed, pixels = native_load(checker, folder, 48, 1, tmp_path / "x86")
    arm_listed, arm_pixels = native_load(arm, folder, 48, 1, tmp_path / "arm64", prefix=QEMU)
    assert arm_listed == listed
    assert arm_pixels == pixels
    assert [np.frombuffer(p, np.float32).tobytes() for p in pixels] == [
        p.pixels.tobytes() for p in py_photos.load_photos(folder, 48)]
    (folder / "d.txt").write_text("a caption")
    refused = run([*QEMU, arm, "load", folder, 48, 1, tmp_path / "arm64"], ok=False)
    native, python = _refusals(checker, folder, 48)
    assert refused.returncode == 2 and refused.stderr.decode().strip() == native == python
