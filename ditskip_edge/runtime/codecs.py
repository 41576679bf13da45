"""The residual-cache codecs in numpy: the device's encoder (its subject stage writes the cache itself) and a decoder
(to measure the coding error it records, as the host does). The twin of the host's `ditskip_edge/cache/codecs.py`
(torch): the same arithmetic, so int8 / int4 / fp16 / fp32 codes are bit-identical to the host's for the same
residual; lowrank takes numpy's SVD (LAPACK, like torch's), whose factors may differ from torch's in sign and in the
last bits, so its codes may differ by one step where a value sits on a rounding boundary.

Quantization is symmetric: code = round(d / scale) (half to even, as torch.round), scale = absmax / qmax over the
scale's group (qmax 127 for int8, 7 for int4), at least MIN_SCALE; int4 codes are packed two a byte (low nibble =
even channel, value = nibble - 8); fp16 values are stored as their two little-endian bytes; lowrank-rR is the
truncated SVD U S V^T -> u = U[:, :r] S[:r] (int8, scale per rank column), v = V^T[:r] (int8, scale per row).
The layouts are runtime/cache_format.py's.
"""

from __future__ import annotations

import numpy as np

from .cache_format import X0, CacheCodec, TensorCodec

FP16_MAX = 65504.0
MIN_SCALE = np.float32(1e-12)


def encode_tensor(c: TensorCodec, d: np.ndarray) -> dict[str, np.ndarray]:
    """One residual [B, N, D] float32 -> its stored parts."""
    d = np.ascontiguousarray(d, dtype=np.float32)
    if c.kind == "fp32":
        return {"values": d}
    if c.kind == "fp16":
        half = np.clip(d, -FP16_MAX, FP16_MAX).astype("<f2")
        return {"values": half.view(np.uint8).reshape(*d.shape[:-1], 2 * d.shape[-1])}
    if c.kind == "lowrank":
        return _encode_lowrank(d, c.rank)
    qmax = np.float32(127 if c.kind == "int8" else 7)
    g = d.reshape(c.group_shape(tuple(d.shape)))
    reduce_axis = 2 if c.axis == "channel" else 3
    scale = np.maximum(np.abs(g).max(axis=reduce_axis, keepdims=True) / qmax, MIN_SCALE).astype(np.float32)
    q = np.clip(np.round(g / scale), -qmax, qmax).reshape(d.shape)
    if c.kind == "int8":
        return {"codes": q.astype(np.int8), "scale": scale}
    u = (q + 8).astype(np.int32)                                           # 1..15
    return {"codes": (u[..., 0::2] + 16 * u[..., 1::2]).astype(np.uint8), "scale": scale}


def _encode_lowrank(d: np.ndarray, rank: int) -> dict[str, np.ndarray]:
    B, N, D = d.shape
    r = min(rank, N, D)
    U, S, Vh = np.linalg.svd(d, full_matrices=False)                       # [B, N, k], [B, k], [B, k, D]
    u = (U[..., :r] * S[:, None, :r]).astype(np.float32)
    v = Vh[:, :r, :].astype(np.float32)
    su = np.maximum(np.abs(u).max(axis=1, keepdims=True) / np.float32(127), MIN_SCALE).astype(np.float32)
    sv = np.maximum(np.abs(v).max(axis=2, keepdims=True) / np.float32(127), MIN_SCALE).astype(np.float32)
    return {"u.codes": np.clip(np.round(u / su), -127, 127).astype(np.int8), "u.scale": su,
            "v.codes": np.clip(np.round(v / sv), -127, 127).astype(np.int8), "v.scale": sv}


def decode_tensor(c: TensorCodec, parts: dict[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Stored parts -> the float32 residual (what the program's in-graph decoder computes)."""
    if c.kind == "fp32":
        return np.asarray(parts["values"], np.float32)
    if c.kind == "fp16":
        return np.ascontiguousarray(parts["values"]).view("<f2").astype(np.float32).reshape(shape)
    if c.kind == "lowrank":
        u = parts["u.codes"].astype(np.float32) * parts["u.scale"]
        v = parts["v.codes"].astype(np.float32) * parts["v.scale"]
        return np.matmul(u, v)
    if c.kind == "int8":
        q = parts["codes"].astype(np.float32)
    else:
        p = parts["codes"].astype(np.int32)
        q = np.stack([p % 16, p // 16], axis=-1).reshape(shape).astype(np.float32) - 8.0
    return (q.reshape(c.group_shape(shape)) * parts["scale"]).reshape(shape).astype(np.float32)


def encode_entry(codec: CacheCodec, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """{"x0", residual name: float32} -> every stored part, flat: {"x0", "front.img.codes", ...}."""
    out = {}
    for name, t in tensors.items():
        if name == X0:
            out[X0] = np.ascontiguousarray(t, dtype=np.float32)
            continue
        c = codec.for_name(name)
        c.check(name, tuple(t.shape))
        out.update({f"{name}.{p}": np.ascontiguousarray(v) for p, v in encode_tensor(c, t).items()})
    return out


def decode_entry(codec: CacheCodec, parts: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> dict:
    """Stored parts -> {residual name: float32} (x0 left out)."""
    out = {}
    for name, shape in shapes.items():
        if name == X0:
            continue
        c = codec.for_name(name)
        mine = {p: parts[f"{name}.{p}"] for p in c.parts(tuple(shape))}
        out[name] = decode_tensor(c, mine, tuple(shape))
    return out


def relative_error(d_hat: np.ndarray, d: np.ndarray) -> float:
    """||d_hat - d|| / ||d|| (the coding error the cache index records)."""
    return float(np.linalg.norm((d_hat - d).ravel()) / max(float(np.linalg.norm(d.ravel())), 1e-30))
