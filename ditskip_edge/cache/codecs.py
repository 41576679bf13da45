"""Residual-cache codecs: how one residual tensor d [B, N, D] is stored, and the in-graph decoder that undoes it.

A codec spec is a string, recorded in the cache index and the bundle manifest:

    fp32                 the residuals as computed (reference)
    fp16                 half precision
    int8-token           int8 codes [B, N, D], one fp16 scale per token        [B, N, 1, 1]
    int8-channel         int8 codes [B, N, D], one fp16 scale per channel      [B, 1, 1, D]
    int4-g32             int4 codes packed two a byte [B, N, D/2] (channel pairs), one fp16 scale per token and
                         group of 32 channels [B, N, D/32, 1]; any group size: int4-g64, ...
    int4-t32             the same with groups of 32 *tokens* per channel [B, N/32, 1, D]
    int8-g32, int8-t32   int8 with the same group-wise scales
    lowrank-r8           d ~ U V with U [B, N, r] int8 (scale per rank column), V [B, r, D] int8 (scale per row):
                         truncated SVD per sample, rank r fixed (static shapes for the device graphs)
    int8-channel,front.txt=lowrank-r8    per-residual overrides: "<default>,<name>=<codec>,..."

Quantization is symmetric: code = round(d / scale), scale = absmax / qmax (qmax 127 for int8, 7 for int4), over the
scale's group. Scales are stored in fp16 (rounded *up* so no code clips). A group size that does not divide the
axis falls back to the whole axis.

Decoding uses only plain, exportable torch ops (to(), mul, reshape, remainder, div, stack, matmul): no bitwise
ops, so ExecuTorch's portable kernels and ONNX opset 16 take it. The decoder is an nn.Module built from the codec
and the residual shapes alone (`decoder_for`); its input is one sample's encoded entry (flat part names such as
"front.img.codes", "front.img.scale"), its output the decoded residuals {"front.img": fp32 [B, N, D], ...}.

Clean latents "x0" are not coded: they stay fp32 (the flow-matching target is built from them, and they are
< 1% of an entry at real model sizes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import torch.nn as nn

from ..errors import UserError

X0 = "x0"
FP16_MAX = 65504.0


# ----------------------------------------------------------------------------------------------------------------
# one tensor's codec


@dataclass(frozen=True)
class TensorCodec:
    kind: str                  # "fp32" | "fp16" | "int8" | "int4" | "lowrank"
    axis: str = "token"        # int8/int4: which axis one scale spans: "token" (groups of channels within a token)
                               # or "channel" (groups of tokens within a channel)
    group: int = 0             # int4: group size along that axis; 0 = the whole axis
    rank: int = 0              # lowrank: rank r

    @property
    def spec(self) -> str:
        if self.kind in ("fp32", "fp16"):
            return self.kind
        if self.kind == "int8" and not self.group:
            return f"int8-{self.axis}"
        if self.kind in ("int8", "int4"):
            return f"{self.kind}-{'g' if self.axis == 'token' else 't'}{self.group}"
        return f"lowrank-r{self.rank}"

    @staticmethod
    def parse(s: str) -> "TensorCodec":
        s = s.strip()
        if s in ("fp32", "fp16"):
            return TensorCodec(s)
        if s in ("int8-token", "int8-channel"):
            return TensorCodec("int8", axis=s.split("-")[1])
        if m := re.fullmatch(r"(int[48])-([gt])(\d+)", s):
            g = int(m.group(3))
            if g < 2 or g % 2:
                raise UserError(f"cache codec {s!r}: group size must be an even number >= 2")
            return TensorCodec(m.group(1), axis="token" if m.group(2) == "g" else "channel", group=g)
        if m := re.fullmatch(r"lowrank-r(\d+)", s):
            if int(m.group(1)) < 1:
                raise UserError(f"cache codec {s!r}: rank must be >= 1")
            return TensorCodec("lowrank", rank=int(m.group(1)))
        raise UserError(f"unknown cache codec {s!r}: expected fp32, fp16, int8-token, int8-channel, int8-gG, int8-tG, "
                        f"int4-gG, int4-tG, "
                        f"lowrank-rR (or 'DEFAULT,name=CODEC,...')")

    # --- layout ------------------------------------------------------------------------------------------------

    def parts(self, shape: tuple[int, ...]) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Stored parts of a tensor of this shape: {part: (dtype name, shape)}."""
        B, N, D = shape
        if self.kind == "fp32":
            return {"values": ("float32", (B, N, D))}
        if self.kind == "fp16":
            return {"values": ("float16", (B, N, D))}
        if self.kind in ("int8", "int4"):
            gshape = _group_shape(self, shape)
            sshape = (gshape[0], gshape[1], 1, gshape[3]) if self.axis == "channel" else (*gshape[:3], 1)
            codes = ("int8", (B, N, D)) if self.kind == "int8" else ("uint8", (B, N, D // 2))
            return {"codes": codes, "scale": ("float16", sshape)}
        r = min(self.rank, N, D)
        return {"u.codes": ("int8", (B, N, r)), "u.scale": ("float16", (B, 1, r)),
                "v.codes": ("int8", (B, r, D)), "v.scale": ("float16", (B, r, 1))}

    def check(self, name: str, shape: tuple[int, ...]) -> None:
        if len(shape) != 3:
            raise UserError(f"residual {name!r}: expected [B, N, D], got shape {list(shape)}")
        if self.kind == "int4" and shape[2] % 2:
            raise UserError(f"residual {name!r}: int4 packs channel pairs, D = {shape[2]} is odd")

    # --- encode (host) -----------------------------------------------------------------------------------------

    @torch.no_grad()
    def encode(self, d: torch.Tensor) -> dict[str, torch.Tensor]:
        d = d.detach().float().contiguous()
        if self.kind == "fp32":
            return {"values": d}
        if self.kind == "fp16":
            return {"values": d.clamp(-FP16_MAX, FP16_MAX).half()}
        if self.kind == "lowrank":
            return _encode_lowrank(d, self.rank)
        qmax = 127 if self.kind == "int8" else 7
        gshape = _group_shape(self, tuple(d.shape))
        g = d.reshape(gshape)
        reduce_dim = 2 if self.axis == "channel" else 3
        scale = _fp16_scale(g.abs().amax(reduce_dim, keepdim=True) / qmax)
        q = torch.clamp(torch.round(g / scale.float()), -qmax, qmax).reshape(d.shape)
        if self.kind == "int8":
            return {"codes": q.to(torch.int8), "scale": scale}
        u = (q + 8).to(torch.int32)                                    # 1..15
        packed = (u[..., 0::2] + 16 * u[..., 1::2]).to(torch.uint8)   # [B, N, D/2]: low nibble = even channel
        return {"codes": packed, "scale": scale}

    # --- decode (in-graph) -------------------------------------------------------------------------------------

    def decode(self, parts: dict[str, torch.Tensor], shape: tuple[int, ...]) -> torch.Tensor:
        if self.kind in ("fp32", "fp16"):
            return parts["values"].to(torch.float32)
        if self.kind == "lowrank":
            u = parts["u.codes"].to(torch.float32) * parts["u.scale"].to(torch.float32)
            v = parts["v.codes"].to(torch.float32) * parts["v.scale"].to(torch.float32)
            return torch.matmul(u, v)
        gshape = _group_shape(self, shape)
        if self.kind == "int8":
            q = parts["codes"].to(torch.float32)
        else:
            p = parts["codes"].to(torch.int32)
            lo = torch.remainder(p, 16)
            hi = torch.div(p, 16, rounding_mode="floor")
            q = torch.stack([lo, hi], dim=-1).reshape(shape).to(torch.float32) - 8.0
        return (q.reshape(gshape) * parts["scale"].to(torch.float32)).reshape(shape)


def _group_shape(c: TensorCodec, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """[B, N, D] viewed as scale groups: axis "token" -> [B, N, D/g, g]; axis "channel" -> [B, N/g, g, D]."""
    B, N, D = shape
    if c.axis == "channel":
        g = c.group if c.group and N % c.group == 0 else N
        return (B, N // g, g, D)
    g = c.group if c.group and D % c.group == 0 else D
    return (B, N, D // g, g)


def _fp16_scale(scale: torch.Tensor) -> torch.Tensor:
    """fp16 scales, rounded up (so |d| / scale <= qmax after rounding) and never zero."""
    s = scale.clamp(1e-7, FP16_MAX)
    h = s.half()
    low = h.float() < s
    h[low] = torch.nextafter(h[low], torch.full_like(h[low], float("inf")))
    return h


def _encode_lowrank(d: torch.Tensor, rank: int) -> dict[str, torch.Tensor]:
    B, N, D = d.shape
    r = min(rank, N, D)
    U, S, Vh = torch.linalg.svd(d, full_matrices=False)             # [B, N, k], [B, k], [B, k, D]
    u = U[..., :r] * S[:, None, :r]                                  # [B, N, r]
    v = Vh[:, :r, :]                                                 # [B, r, D]
    su = _fp16_scale(u.abs().amax(1, keepdim=True) / 127)            # [B, 1, r]
    sv = _fp16_scale(v.abs().amax(2, keepdim=True) / 127)            # [B, r, 1]
    return {"u.codes": torch.clamp(torch.round(u / su.float()), -127, 127).to(torch.int8), "u.scale": su,
            "v.codes": torch.clamp(torch.round(v / sv.float()), -127, 127).to(torch.int8), "v.scale": sv}


# ----------------------------------------------------------------------------------------------------------------
# a cache's codec: a default plus per-residual overrides


@dataclass(frozen=True)
class CacheCodec:
    default: TensorCodec
    overrides: tuple[tuple[str, TensorCodec], ...] = ()

    @staticmethod
    def parse(spec: str | dict | "CacheCodec") -> "CacheCodec":
        if isinstance(spec, CacheCodec):
            return spec
        if isinstance(spec, dict):          # as stored in a cache index
            spec = spec["spec"]
        items = [s.strip() for s in str(spec).split(",") if s.strip()]
        defaults = [s for s in items if "=" not in s]
        if len(defaults) != 1:
            raise UserError(f"cache codec {spec!r}: give exactly one default codec, e.g. 'int8-channel' or "
                            f"'int8-channel,front.txt=lowrank-r8'")
        over = tuple((k.strip(), TensorCodec.parse(v)) for k, v in (s.split("=", 1) for s in items if "=" in s))
        return CacheCodec(TensorCodec.parse(defaults[0]), over)

    @property
    def spec(self) -> str:
        return ",".join([self.default.spec] + [f"{k}={c.spec}" for k, c in self.overrides])

    def for_name(self, name: str) -> TensorCodec:
        return dict(self.overrides).get(name, self.default)

    def to_json(self) -> dict:
        return {"spec": self.spec}

    def parts(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Every stored part of an entry, flat: {"x0": ("float32", shape), "front.img.codes": (...), ...}."""
        out = {}
        for name, shape in shapes.items():
            if name == X0:
                out[X0] = ("float32", tuple(shape))
                continue
            c = self.for_name(name)
            c.check(name, tuple(shape))
            out.update({f"{name}.{p}": v for p, v in c.parts(tuple(shape)).items()})
        return out

    def encode(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {}
        for name, t in tensors.items():
            if name == X0:
                out[X0] = t.detach().float().contiguous()
                continue
            c = self.for_name(name)
            c.check(name, tuple(t.shape))
            out.update({f"{name}.{p}": v.contiguous() for p, v in c.encode(t).items()})
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
            out[name] = self.codec.for_name(name).decode(parts, shape)
        return out


def decoder_for(codec_config: str | dict | CacheCodec, shapes: dict[str, list[int] | tuple[int, ...]]) -> nn.Module:
    """The in-graph decoder of a cache: codec (spec string, index dict or CacheCodec) and decoded shapes."""
    return ResidualDecoder(CacheCodec.parse(codec_config), {k: tuple(v) for k, v in shapes.items()})


def entry_bytes(codec: CacheCodec, shapes: dict[str, tuple[int, ...]], with_x0: bool = True) -> int:
    """Stored bytes of one entry (without alignment padding)."""
    return sum(torch.empty((), dtype=getattr(torch, dt)).element_size() * math.prod(shape)
               for name, (dt, shape) in codec.parts(shapes).items() if with_x0 or name != X0)
