"""The on-device residual-cache format: an index and binary shards, read one sample at a time through mmap.

    cache/
      cache_index.json     format + version, identity (model, plan, schedule) and its SHA-256, codec, decoded
                           shapes, the entry layout (every part's dtype, shape, byte offset inside an entry),
                           and per entry: shard, byte offset, bytes, SHA-256; per shard: bytes, SHA-256
      shard_00000.bin      entries back to back, each part 64-byte aligned (little-endian, C order)
      shard_00001.bin      ...

Every entry has the same layout (the codec and the shapes are static), so a device reads sample k by mapping its
shard and slicing [offset, offset + entry_bytes): nothing else of the file is touched. Each read verifies that
slice's SHA-256 before decoding; opening verifies the format, the identity and every shard's size; `verify()`
hashes whole shards (the bundle manifest lists them too).

Writing is atomic: a shard is written under a temporary name and renamed when complete; the index is written
last, the same way. A cache without its index does not open.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from pathlib import Path

import numpy as np
import torch

from ..errors import BundleError
from .codecs import X0, CacheCodec, decoder_for

INDEX = "cache_index.json"
CACHE_FORMAT = "ditskip-edge-residual-cache"
CACHE_FORMAT_VERSION = 2
ALIGN = 64
DEFAULT_SHARD_BYTES = 64 << 20       # shards close at about this size (a sample never spans two)

_NP = {"float32": np.float32, "float16": np.float16, "int8": np.int8, "uint8": np.uint8}


def identity_digest(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def entry_layout(codec: CacheCodec, shapes: dict[str, tuple[int, ...]]) -> tuple[dict, int]:
    """{part: {"dtype", "shape", "offset", "bytes"}} inside one entry, and the entry's aligned size."""
    layout, off = {}, 0
    for name, (dtype, shape) in codec.parts(shapes).items():
        n = int(np.dtype(_NP[dtype]).itemsize * np.prod(shape, dtype=np.int64))
        layout[name] = {"dtype": dtype, "shape": list(shape), "offset": off, "bytes": n}
        off = _align(off + n)
    return layout, off


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CacheWriter:
    """CacheWriter(dir, identity, codec).add(0, {"x0": ..., "front.img": ...}) ... .finish() -> index dict."""

    def __init__(self, directory: Path, identity: dict, codec: str | CacheCodec = "fp32",
                 shard_bytes: int = DEFAULT_SHARD_BYTES):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.identity = identity
        self.codec = CacheCodec.parse(codec)
        self.shard_bytes = shard_bytes
        self.shapes: dict[str, list[int]] = {}
        self.layout: dict | None = None
        self.entry_size = 0
        self.entries: list[dict] = []
        self.shards: dict[str, dict] = {}
        self._f = None
        self._name = ""
        self._hash = None
        self._pos = 0
        self.rel_errors: dict[str, list[float]] = {}     # per residual, per entry: ||d_hat - d|| / ||d||

    def _record_error(self, tensors: dict[str, torch.Tensor], parts: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            decoded = decoder_for(self.codec, self.shapes)(parts)
        for name, d_hat in decoded.items():
            d = tensors[name].detach().float()
            self.rel_errors.setdefault(name, []).append(float((d_hat - d).norm() / d.norm().clamp_min(1e-30)))

    def error_summary(self) -> dict:
        """{residual: {"mean", "max"}} of the relative error over the entries written so far."""
        return {k: {"mean": sum(v) / len(v), "max": max(v)} for k, v in self.rel_errors.items()}

    def add(self, index: int, tensors: dict[str, torch.Tensor]) -> None:
        if index != len(self.entries):
            raise ValueError(f"cache entries must be added in order: got {index}, expected {len(self.entries)}")
        shapes = {k: list(v.shape) for k, v in tensors.items()}
        if self.layout is None:
            self.shapes = shapes
            self.layout, self.entry_size = entry_layout(self.codec, {k: tuple(v) for k, v in shapes.items()})
        elif shapes != self.shapes:
            raise ValueError(f"cache entry {index}: shapes {shapes} differ from the first entry's {self.shapes}")
        parts = self.codec.encode(tensors)
        self._record_error(tensors, parts)
        buf = bytearray(self.entry_size)
        for name, info in self.layout.items():
            raw = parts[name].detach().cpu().contiguous().numpy().astype(_NP[info["dtype"]], copy=False).tobytes()
            buf[info["offset"]:info["offset"] + len(raw)] = raw
        if self._f is None or self._pos + self.entry_size > self.shard_bytes and self._pos > 0:
            self._close_shard()
            self._open_shard()
        self._f.write(buf)
        self._hash.update(buf)
        self.entries.append({"shard": self._name, "offset": self._pos, "bytes": self.entry_size,
                             "sha256": hashlib.sha256(buf).hexdigest()})
        self._pos += self.entry_size

    def _open_shard(self) -> None:
        self._name = f"shard_{len(self.shards):05d}.bin"
        self._f = open(self.dir / (self._name + ".tmp"), "wb")
        self._hash = hashlib.sha256()
        self._pos = 0

    def _close_shard(self) -> None:
        if self._f is None:
            return
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self.dir / (self._name + ".tmp"), self.dir / self._name)
        self.shards[self._name] = {"bytes": self._pos, "sha256": self._hash.hexdigest()}
        self._f = None

    def finish(self) -> dict:
        self._close_shard()
        index = {"format": CACHE_FORMAT, "format_version": CACHE_FORMAT_VERSION,
                 "identity": self.identity, "identity_sha256": identity_digest(self.identity),
                 "codec": self.codec.to_json(), "shapes": self.shapes, "rel_error": self.error_summary(), "layout": self.layout,
                 "entry_bytes": self.entry_size, "num_entries": len(self.entries),
                 "shards": self.shards, "entries": self.entries}
        _atomic_write_text(self.dir / INDEX, json.dumps(index, indent=1))
        return index


class CacheReader:
    """len(reader); reader.read_encoded(k) -> stored parts; reader.read(k) -> decoded {"x0", "front.img", ...}."""

    def __init__(self, directory: Path, identity: dict | None = None):
        self.dir = Path(directory)
        ipath = self.dir / INDEX
        if not ipath.is_file():
            raise BundleError(f"{ipath}: residual cache index missing")
        try:
            self.index = json.loads(ipath.read_text())
        except ValueError as e:
            raise BundleError(f"{ipath}: not valid JSON ({e})") from e
        if self.index.get("format") != CACHE_FORMAT or self.index.get("format_version") != CACHE_FORMAT_VERSION:
            raise BundleError(f"{ipath}: format {self.index.get('format')!r} version "
                              f"{self.index.get('format_version')}, expected {CACHE_FORMAT!r} version "
                              f"{CACHE_FORMAT_VERSION}")
        if identity_digest(self.index["identity"]) != self.index["identity_sha256"]:
            raise BundleError(f"{ipath}: field identity does not match identity_sha256 (index edited or corrupt)")
        if identity is not None and self.index["identity_sha256"] != identity_digest(identity):
            raise BundleError(f"{ipath}: cache was made for another model, plan or schedule "
                              f"(identity_sha256 {self.index['identity_sha256'][:12]}.., expected "
                              f"{identity_digest(identity)[:12]}..)")
        self.codec = CacheCodec.parse(self.index["codec"])
        self.shapes = {k: tuple(v) for k, v in self.index["shapes"].items()}
        expect_layout, expect_bytes = entry_layout(self.codec, self.shapes)
        if expect_layout != self.index["layout"] or expect_bytes != self.index["entry_bytes"]:
            raise BundleError(f"{ipath}: field layout does not match codec {self.codec.spec} and shapes")
        self.layout = self.index["layout"]
        for name, info in self.index["shards"].items():
            p = self.dir / name
            if not p.is_file():
                raise BundleError(f"{p}: residual cache shard missing")
            if p.stat().st_size != info["bytes"]:
                raise BundleError(f"{p}: {p.stat().st_size} bytes, {INDEX} says {info['bytes']} (truncated or "
                                  f"overwritten)")
        self._maps: dict[str, mmap.mmap] = {}
        self._decoder: torch.nn.Module | None = None

    def __len__(self) -> int:
        return len(self.index["entries"])

    @property
    def codec_config(self) -> dict:
        return self.index["codec"]

    @property
    def entry_bytes(self) -> int:
        return int(self.index["entry_bytes"])

    def decoder(self) -> torch.nn.Module:
        if self._decoder is None:
            self._decoder = decoder_for(self.codec, self.shapes)
        return self._decoder

    def _map(self, shard: str) -> mmap.mmap:
        if shard not in self._maps:
            with open(self.dir / shard, "rb") as f:
                self._maps[shard] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._maps[shard]

    def read_encoded(self, index: int) -> dict[str, torch.Tensor]:
        """One sample's stored parts ("x0", "front.img.codes", "front.img.scale", ...), checked against its SHA-256."""
        e = self.index["entries"][index]
        raw = self._map(e["shard"])[e["offset"]:e["offset"] + e["bytes"]]     # this sample's bytes only
        if len(raw) != e["bytes"] or hashlib.sha256(raw).hexdigest() != e["sha256"]:
            raise BundleError(f"{self.dir / e['shard']}: entry {index} (bytes {e['offset']}..{e['offset'] + e['bytes']})"
                              f" does not match its SHA-256 in {INDEX} (corrupt)")
        buf = bytearray(raw)
        out = {}
        for name, info in self.layout.items():
            arr = np.frombuffer(buf, dtype=_NP[info["dtype"]], count=int(np.prod(info["shape"], dtype=np.int64)),
                                offset=info["offset"]).reshape(info["shape"])
            out[name] = torch.from_numpy(arr)
        return out

    def read(self, index: int) -> dict[str, torch.Tensor]:
        """One sample decoded on the host: {"x0": fp32, "front.img": fp32 [B, N, D], ...}."""
        enc = self.read_encoded(index)
        with torch.no_grad():
            out = {X0: enc[X0]} if X0 in enc else {}
            out.update(self.decoder()(enc))
        return out

    def verify(self) -> None:
        """Hash every shard whole (what a host does before trusting a cache it did not write)."""
        for name, info in self.index["shards"].items():
            h = hashlib.sha256()
            with open(self.dir / name, "rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
            if h.hexdigest() != info["sha256"]:
                raise BundleError(f"{self.dir / name}: SHA-256 does not match {INDEX} (corrupt)")

    def close(self) -> None:
        for m in self._maps.values():
            m.close()
        self._maps.clear()
