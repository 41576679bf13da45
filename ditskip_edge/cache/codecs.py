"""Residual-cache codecs, the arithmetic half: host encoders and the exportable in-graph decoder.

The codec specs and the stored parts' layout are the runtime's (`ditskip_edge/runtime/cache_format.py`: what a
spec means, which parts with which dtypes and shapes). Here:
- `encode_tensor(codec, d)` / `encode_entry(cache_codec, tensors)`: the host's encoders (torch);
- `decode_tensor(codec, parts, shape)` and `ResidualDecoder` / `decoder_for`: the decoder, built from plain,
  exportable torch ops (to(), mul, reshape, remainder, div, stack, matmul; no bitwise ops, so ExecuTorch's portable
  kernels and ONNX opset 16 take it). Its input is one sample's encoded entry (flat part names such as
  "front.img.codes", "front.img.scale"), its output the decoded residuals {"front.img": fp32 [B, N, D], ...}.

Quantization is symmetric: code = round(d / scale), scale = absmax / qmax (qmax 127 for int8, 7 for int4), over the
scale's group; scales are float32. fp16 values are stored as their two bytes each (uint8) and decoded in the graph
with integer arithmetic (sign, exponent, mantissa; subnormals included), so no stored part is float16.

Clean latents "x0" are not coded: they stay fp32 (the flow-matching target is built from them, and they are
< 1% of an entry at real model sizes).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..runtime.cache_format import DTYPE_BYTES, X0, CacheCodec, TensorCodec

FP16_MAX = 65504.0
MIN_SCALE = 1e-12


@torch.no_grad()
def encode_tensor(c: TensorCodec, d: torch.Tensor) -> dict[str, torch.Tensor]:
    """One residual [B, N, D] -> its stored parts (runtime/cache_format.py names and shapes them)."""
    d = d.detach().float().contiguous()
    if c.kind == "fp32":
        return {"values": d}
    if c.kind == "fp16":
        half = d.clamp(-FP16_MAX, FP16_MAX).half().contiguous()
        return {"values": half.view(torch.uint8).reshape(*d.shape[:-1], 2 * d.shape[-1])}     # little-endian pairs
    if c.kind == "lowrank":
        return _encode_lowrank(d, c.rank)
    qmax = 127 if c.kind == "int8" else 7
    g = d.reshape(c.group_shape(tuple(d.shape)))
    reduce_dim = 2 if c.axis == "channel" else 3
    scale = (g.abs().amax(reduce_dim, keepdim=True) / qmax).clamp_min(MIN_SCALE)
    q = torch.clamp(torch.round(g / scale), -qmax, qmax).reshape(d.shape)
    if c.kind == "int8":
        return {"codes": q.to(torch.int8), "scale": scale}
    u = (q + 8).to(torch.int32)                                    # 1..15
    packed = (u[..., 0::2] + 16 * u[..., 1::2]).to(torch.uint8)   # [B, N, D/2]: low nibble = even channel
    return {"codes": packed, "scale": scale}


def decode_tensor(c: TensorCodec, parts: dict[str, torch.Tensor], shape: tuple[int, ...]) -> torch.Tensor:
    """Stored parts -> the fp32 residual [B, N, D] (in-graph: plain exportable ops)."""
    if c.kind == "fp32":
        return parts["values"].to(torch.float32)
    if c.kind == "fp16":
        return _decode_fp16_bytes(parts["values"])
    if c.kind == "lowrank":
        u = parts["u.codes"].to(torch.float32) * parts["u.scale"]
        v = parts["v.codes"].to(torch.float32) * parts["v.scale"]
        return torch.matmul(u, v)
    gshape = c.group_shape(shape)
    if c.kind == "int8":
        q = parts["codes"].to(torch.float32)
    else:
        p = parts["codes"].to(torch.int32)
        lo = torch.remainder(p, 16)
        hi = torch.div(p, 16, rounding_mode="floor")
        q = torch.stack([lo, hi], dim=-1).reshape(shape).to(torch.float32) - 8.0
    return (q.reshape(gshape) * parts["scale"]).reshape(shape)


def _decode_fp16_bytes(b: torch.Tensor) -> torch.Tensor:
    """uint8 [..., 2D] little-endian IEEE binary16 -> fp32 [..., D], exactly, with plain integer arithmetic:
    u = lo + 256 hi; sign = u >= 2^15; e = (u mod 2^15) div 2^10; m = u mod 2^10;
    value = sign (e > 0 ? (1 + m / 1024) 2^(e - 15) : (m / 1024) 2^-14). (The encoder never stores inf or NaN.)"""
    p = b.to(torch.int32)
    u = p[..., 0::2] + 256 * p[..., 1::2]
    sign = 1.0 - 2.0 * torch.div(u, 32768, rounding_mode="floor").to(torch.float32)
    u15 = torch.remainder(u, 32768)
    e = torch.div(u15, 1024, rounding_mode="floor")
    m = torch.remainder(u15, 1024).to(torch.float32)
    pow2 = torch.tensor([2.0 ** -14] + [2.0 ** (k - 15) for k in range(1, 32)], dtype=torch.float32)[e]
    implicit = (e > 0).to(torch.float32)
    return sign * (implicit + m / 1024.0) * pow2


def _encode_lowrank(d: torch.Tensor, rank: int) -> dict[str, torch.Tensor]:
    B, N, D = d.shape
    r = min(rank, N, D)
    U, S, Vh = torch.linalg.svd(d, full_matrices=False)             # [B, N, k], [B, k], [B, k, D]
    u = U[..., :r] * S[:, None, :r]                                  # [B, N, r]
    v = Vh[:, :r, :]                                                 # [B, r, D]
    su = (u.abs().amax(1, keepdim=True) / 127).clamp_min(MIN_SCALE)  # [B, 1, r]
    sv = (v.abs().amax(2, keepdim=True) / 127).clamp_min(MIN_SCALE)  # [B, r, 1]
    return {"u.codes": torch.clamp(torch.round(u / su), -127, 127).to(torch.int8), "u.scale": su.contiguous(),
            "v.codes": torch.clamp(torch.round(v / sv), -127, 127).to(torch.int8), "v.scale": sv.contiguous()}


def encode_entry(codec: CacheCodec, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """{"x0", residual name: fp32} -> every stored part, flat: {"x0", "front.img.codes", ...}."""
    out = {}
    for name, t in tensors.items():
        if name == X0:
            out[X0] = t.detach().float().contiguous()
            continue
        c = codec.for_name(name)
        c.check(name, tuple(t.shape))
        out.update({f"{name}.{p}": v.contiguous() for p, v in encode_tensor(c, t).items()})
    return out


class ResidualDecoder(nn.Module):
    """forward(entry: {part name: encoded tensor}) -> {residual name: fp32 [B, N, D]}; ignores "x0"."""

    def __init__(self, codec: CacheCodec, shapes: dict[str, tuple[int, ...]]):
        super().__init__()
        self.codec = codec
        self.shapes = {k: tuple(int(s) for s in v) for k, v in shapes.items() if k != X0}
        self.part_names = {k: list(codec.for_name(k).parts(v)) for k, v in self.shapes.items()}

    def forward(self, entry: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {}
        for name, shape in self.shapes.items():
            parts = {p: entry[f"{name}.{p}"] for p in self.part_names[name]}
            out[name] = decode_tensor(self.codec.for_name(name), parts, shape)
        return out


class ZeroResiduals(nn.Module):
    """The ablation "no residual": the skipped spans are skipped and nothing replaces them (every residual 0)."""

    def __init__(self, decoder: ResidualDecoder):
        super().__init__()
        self.decoder = decoder

    def forward(self, entry: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: torch.zeros_like(v) for k, v in self.decoder(entry).items()}


def decoder_for(codec_config: str | dict | CacheCodec, shapes: dict[str, list[int] | tuple[int, ...]]) -> nn.Module:
    """The in-graph decoder of a cache: codec (spec string, index dict or CacheCodec) and decoded shapes."""
    return ResidualDecoder(CacheCodec.parse(codec_config), {k: tuple(v) for k, v in shapes.items()})


def entry_bytes(codec: CacheCodec, shapes: dict[str, tuple[int, ...]], with_x0: bool = True) -> int:
    """Stored bytes of one entry (without alignment padding)."""
    return sum(DTYPE_BYTES[dt] * math.prod(shape) for name, (dt, shape) in codec.parts(shapes).items()
               if with_x0 or name != X0)
