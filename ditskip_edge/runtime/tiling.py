"""Decoding latents and encoding pictures in tiles, as diffusers' autoencoders do with tiling on (AutoencoderKL /
AutoencoderDC `tiled_decode` / `tiled_encode`), so the decoder's (encoder's) activations are those of one tile, not of
the whole picture. Decoding:

    tiling = {"tile_latent": T, "stride_latent": S, "scale": f}     (the manifest's generation.decode record)
    rows start at 0, S, 2S, .. < h (columns the same); a tile is latents[i:i+T, j:j+T] (smaller at the far edges)
    each decoded tile (T f pixels a side) is blended into its upper neighbour over the last (T - S) f rows and then
    into its left neighbour over the last (T - S) f columns, linearly (`blend`), the neighbours being the already
    blended tiles, and its first S f rows and columns go to the picture

Encoding is the same loop the other way round (`encode_tiled`: the subject stage's encode record, runtime/forward.py):
pixel tiles of tile_px every stride_px, latent tiles blended over (tile_px - stride_px) / f cells.

With T >= the latent side there is one tile and nothing is blended: the plain decode. The runtime keeps two rows of
decoded tiles and the picture; the decoder program runs once per tile (one program per distinct tile shape: the
far-edge tiles are smaller, `tile_shapes`).

torch-free: the runtime and the tests use it; the apps port it (Generator.kt / Generator.swift `decodeTiled`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def tile_key(tile_h: int, tile_w: int) -> str:
    """generation.decode.programs' key of a latent tile shape: "<h>x<w>" (Tiling.shapeKey in the apps)."""
    return f"{tile_h}x{tile_w}"


def tile_starts(size: int, stride: int) -> list[int]:
    return list(range(0, size, stride))


def tile_sizes(size: int, tile: int, stride: int) -> list[int]:
    return [min(tile, size - s) for s in tile_starts(size, stride)]


def tile_shapes(latent_hw: tuple[int, int], tile: int, stride: int) -> list[tuple[int, int]]:
    """The distinct latent tile shapes (h, w) a tiled decode runs, in first-use order."""
    shapes: list[tuple[int, int]] = []
    for th in tile_sizes(latent_hw[0], tile, stride):
        for tw in tile_sizes(latent_hw[1], tile, stride):
            if (th, tw) not in shapes:
                shapes.append((th, tw))
    return shapes


def blend_rows(above: np.ndarray, tile: np.ndarray, extent: int) -> None:
    """diffusers' blend_v, in place on `tile` [C, H, W]: its first rows fade in from `above`'s last rows."""
    extent = min(above.shape[1], tile.shape[1], extent)
    for y in range(extent):
        tile[:, y, :] = (above[:, -extent + y, :] * np.float32(1 - y / extent)
                         + tile[:, y, :] * np.float32(y / extent))


def blend_cols(left: np.ndarray, tile: np.ndarray, extent: int) -> None:
    """diffusers' blend_h, in place on `tile` [C, H, W]: its first columns fade in from `left`'s last columns."""
    extent = min(left.shape[2], tile.shape[2], extent)
    for x in range(extent):
        tile[:, :, x] = (left[:, :, -extent + x] * np.float32(1 - x / extent)
                         + tile[:, :, x] * np.float32(x / extent))


def run_tiled(x: np.ndarray, run_tile: Callable[[np.ndarray], np.ndarray] | None, tile: int, stride: int, blend: int,
              keep: int, out_hw: tuple[int, int], by_shape: bool = False,
              run_shape: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None) -> np.ndarray:
    """diffusers' tiled loop, for decoding and encoding alike: x [1, C, H, W] is cut into tiles of `tile` a side
    starting every `stride` (input units; smaller at the far edges); run_tile([1, C, th, tw]) -> [1, C', th', tw'];
    each result is blended into its upper, then its left (already blended) neighbour over `blend` rows / columns, and
    its first `keep` rows and columns go to the output [1, C', *out_hw] at (row, column) index x keep.

    by_shape: every tile is run first, all tiles of one shape after another (tile_shapes' order: a program per shape
    is loaded once), and blended after, as diffusers does; otherwise tile by tile, two rows of results kept.
    run_shape (implies by_shape): all tiles of one shape in one call, [tiles in row-major order] -> [their results]
    (a staged encoder runs each stage's program on every tile of the shape before loading the next stage's)."""
    _, _, h, w = x.shape
    rows, cols = tile_starts(h, stride), tile_starts(w, stride)

    def cut(i: int, j: int) -> np.ndarray:
        return np.ascontiguousarray(x[:, :, i:i + tile, j:j + tile])

    def run(i: int, j: int) -> np.ndarray:
        assert run_tile is not None
        return np.array(run_tile(cut(i, j))[0], np.float32)

    if run_shape is None and by_shape:
        def run_shape(tiles: list[np.ndarray]) -> list[np.ndarray]:
            assert run_tile is not None
            return [run_tile(t) for t in tiles]
    done: dict[tuple[int, int], np.ndarray] = {}
    if run_shape is not None:
        by_shape = True
        for shape in tile_shapes((h, w), tile, stride):
            at = [(r, c, i, j) for r, i in enumerate(rows) for c, j in enumerate(cols)
                  if (min(tile, h - i), min(tile, w - j)) == shape]
            results = run_shape([cut(i, j) for _, _, i, j in at])
            for (r, c, _, _), y in zip(at, results):
                done[r, c] = np.array(y[0], np.float32)
    out: np.ndarray | None = None
    above: list[np.ndarray] = []
    for r, i in enumerate(rows):
        row: list[np.ndarray] = []
        for c, j in enumerate(cols):
            t = done.pop((r, c)) if by_shape else run(i, j)
            if above:
                blend_rows(above[c], t, blend)
            if row:
                blend_cols(row[-1], t, blend)
            row.append(t)
            if out is None:
                out = np.empty((1, t.shape[0], *out_hw), np.float32)
            y, z = r * keep, c * keep
            part = t[:, :min(keep, out_hw[0] - y), :min(keep, out_hw[1] - z)]
            out[0, :, y:y + part.shape[1], z:z + part.shape[2]] = part
        above = row
    assert out is not None
    return out


def decode_tiled(latents: np.ndarray, decode_tile: Callable[[np.ndarray], np.ndarray], tile: int, stride: int,
                 scale: int) -> np.ndarray:
    """latents [1, C, h, w] -> image [1, 3, h f, w f]; decode_tile([1, C, th, tw]) -> [1, 3, th f, tw f]."""
    _, _, h, w = latents.shape
    return run_tiled(latents, decode_tile, tile, stride, (tile - stride) * scale, stride * scale, (h * scale, w * scale))


def encode_tiled(patch: np.ndarray, encode_tile: Callable[[np.ndarray], np.ndarray] | None, tile_px: int,
                 stride_px: int, scale: int, by_shape: bool = True,
                 encode_shape: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None) -> np.ndarray:
    """patch [1, 3, H, W] -> latents [1, C, H / f, W / f], as diffusers' tiled_encode (AutoencoderKL, AutoencoderDC):
    pixel tiles of tile_px every stride_px, encode_tile([1, 3, th, tw]) -> [1, C, th / f, tw / f], latent tiles blended
    over (tile_px - stride_px) / f cells, stride_px / f kept. tile_px, stride_px and H, W are multiples of f.
    encode_shape instead of encode_tile: every tile of one shape at once (run_tiled's run_shape)."""
    _, _, h, w = patch.shape
    return run_tiled(patch, encode_tile, tile_px, stride_px, (tile_px - stride_px) // scale, stride_px // scale,
                     (h // scale, w // scale), by_shape, encode_shape)
