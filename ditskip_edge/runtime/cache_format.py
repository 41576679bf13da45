"""The residual cache's format, without the arithmetic: codec specs and the byte layout of one entry.

A codec spec is a string, recorded in the cache index and the bundle manifest:

    fp32                 the residuals as computed (reference)
    fp16                 half precision, stored as its bytes: uint8 [B, N, 2D] (little-endian IEEE binary16 pairs)
    int8-token           int8 codes [B, N, D], one fp32 scale per token        [B, N, 1, 1]
    int8-channel         int8 codes [B, N, D], one fp32 scale per channel      [B, 1, 1, D]
    int4-g32             int4 codes packed two a byte [B, N, D/2] (channel pairs), one fp32 scale per token and
                         group of 32 channels [B, N, D/32, 1]; any group size: int4-g64, ...
    int4-t32             the same with groups of 32 *tokens* per channel [B, N/32, 1, D]
    int8-g32, int8-t32   int8 with the same group-wise scales
    lowrank-r8           d ~ U V with U [B, N, r] int8 (scale per rank column), V [B, r, D] int8 (scale per row):
                         truncated SVD per sample, rank r fixed (static shapes for the device graphs)
    int8-channel,front.txt=lowrank-r8    per-residual overrides: "<default>,<name>=<codec>,..."

An entry holds the clean latents "x0" (fp32, never coded) and every residual's stored parts, named
"<residual>.<part>" (e.g. "front.img.codes", "front.img.scale"), each 64-byte aligned, little-endian, C order.
Every part is float32, int8 or uint8: dtypes every device runtime's API can hand to a program (ExecuTorch's Android
Java API has no float16 tensor), so fp16 values travel as their bytes and scales as float32.
Encoding and the in-graph decoder are host code (`ditskip_edge/cache/codecs.py`); a runtime needs only this layout.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass

from .errors import UserError

X0 = "x0"
ALIGN = 64
CACHE_FORMAT = "ditskip-edge-residual-cache"
CACHE_FORMAT_VERSION = 3          # 3: no float16 part (fp16 values as bytes, scales float32)
INDEX = "cache_index.json"
DTYPE_BYTES = {"float32": 4, "int8": 1, "uint8": 1}


@dataclass(frozen=True)
class TensorCodec:
    kind: str                  # "fp32" | "fp16" | "int8" | "int4" | "lowrank"
    axis: str = "token"        # int8/int4: which axis one scale spans: "token" (groups of channels within a token)
                               # or "channel" (groups of tokens within a channel)
    group: int = 0             # group size along that axis; 0 = the whole axis
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
            if g < 2 or g % 2 or g > 1 << 20:
                raise UserError(f"cache codec {s!r}: group size must be an even number in [2, {1 << 20}]")
            return TensorCodec(m.group(1), axis="token" if m.group(2) == "g" else "channel", group=g)
        if m := re.fullmatch(r"lowrank-r(\d+)", s):
            if not 1 <= int(m.group(1)) <= 4096:
                raise UserError(f"cache codec {s!r}: rank must be in [1, 4096]")
            return TensorCodec("lowrank", rank=int(m.group(1)))
        raise UserError(f"unknown cache codec {s!r}: expected fp32, fp16, int8-token, int8-channel, int8-gG, int8-tG, "
                        f"int4-gG, int4-tG, lowrank-rR (or 'DEFAULT,name=CODEC,...')")

    def group_shape(self, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
        """[B, N, D] viewed as scale groups: axis "token" -> [B, N, D/g, g]; axis "channel" -> [B, N/g, g, D]. A group
        size that does not divide its axis spans the whole axis."""
        B, N, D = shape
        if self.axis == "channel":
            g = self.group if self.group and N % self.group == 0 else N
            return (B, N // g, g, D)
        g = self.group if self.group and D % self.group == 0 else D
        return (B, N, D // g, g)

    def parts(self, shape: tuple[int, ...]) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Stored parts of a tensor of this shape: {part: (dtype name, shape)}."""
        B, N, D = shape
        if self.kind == "fp32":
            return {"values": ("float32", (B, N, D))}
        if self.kind == "fp16":
            return {"values": ("uint8", (B, N, 2 * D))}
        if self.kind in ("int8", "int4"):
            gshape = self.group_shape(shape)
            sshape = (gshape[0], gshape[1], 1, gshape[3]) if self.axis == "channel" else (*gshape[:3], 1)
            codes = ("int8", (B, N, D)) if self.kind == "int8" else ("uint8", (B, N, D // 2))
            return {"codes": codes, "scale": ("float32", sshape)}
        r = min(self.rank, N, D)
        return {"u.codes": ("int8", (B, N, r)), "u.scale": ("float32", (B, 1, r)),
                "v.codes": ("int8", (B, r, D)), "v.scale": ("float32", (B, r, 1))}

    def check(self, name: str, shape: tuple[int, ...]) -> None:
        if len(shape) != 3:
            raise UserError(f"residual {name!r}: expected [B, N, D], got shape {list(shape)}")
        if self.kind == "int4" and shape[2] % 2:
            raise UserError(f"residual {name!r}: int4 packs channel pairs, D = {shape[2]} is odd")


@dataclass(frozen=True)
class CacheCodec:
    """A cache's codec: a default plus per-residual overrides."""
    default: TensorCodec
    overrides: tuple[tuple[str, TensorCodec], ...] = ()

    @staticmethod
    def parse(spec: "str | dict | CacheCodec") -> "CacheCodec":
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


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def entry_layout(codec: CacheCodec, shapes: dict[str, tuple[int, ...]]) -> tuple[dict, int]:
    """{part: {"dtype", "shape", "offset", "bytes"}} inside one entry, and the entry's aligned size."""
    layout, off = {}, 0
    for name, (dtype, shape) in codec.parts(shapes).items():
        n = DTYPE_BYTES[dtype] * math.prod(shape)
        layout[name] = {"dtype": dtype, "shape": list(shape), "offset": off, "bytes": n}
        off = _align(off + n)
    return layout, off


def identity_digest(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
