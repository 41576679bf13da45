"""Decoding latents in tiles, as diffusers' autoencoders do with tiling on (AutoencoderKL / AutoencoderDC
`tiled_decode`), so a decoder's activations are those of one tile, not of the whole picture.

    tiling = {"tile_latent": T, "stride_latent": S, "scale": f}     (the manifest's generation.decode record)
    rows start at 0, S, 2S, .. < h (columns the same); a tile is latents[i:i+T, j:j+T] (smaller at the far edges)
    each decoded tile (T f pixels a side) is blended into its upper neighbour over the last (T - S) f rows and then
    into its left neighbour over the last (T - S) f columns, linearly (`blend`), the neighbours being the already
    blended tiles, and its first S f rows and columns go to the picture

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


def decode_tiled(latents: np.ndarray, decode_tile: Callable[[np.ndarray], np.ndarray], tile: int, stride: int,
                 scale: int) -> np.ndarray:
    """latents [1, C, h, w] -> image [1, 3, h f, w f]; decode_tile([1, C, th, tw]) -> [1, 3, th f, tw f]."""
    _, _, h, w = latents.shape
    blend, keep = (tile - stride) * scale, stride * scale
    image: np.ndarray | None = None
    above: list[np.ndarray] = []
    for i in tile_starts(h, stride):
        row: list[np.ndarray] = []
        for k, j in enumerate(tile_starts(w, stride)):
            t = np.array(decode_tile(np.ascontiguousarray(latents[:, :, i:i + tile, j:j + tile]))[0], np.float32)
            if above:
                blend_rows(above[k], t, blend)
            if row:
                blend_cols(row[-1], t, blend)
            row.append(t)
            if image is None:
                image = np.empty((1, t.shape[0], h * scale, w * scale), np.float32)
            part = t[:, :keep, :keep]
            image[0, :, i * scale:i * scale + part.shape[1], j * scale:j * scale + part.shape[2]] = part
        above = row
    assert image is not None
    return image
