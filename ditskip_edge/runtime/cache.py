"""The on-device residual cache: an index and binary shards, read one sample at a time through mmap. numpy only.

    cache/
      cache_index.json     format + version, identity (model, plan, schedule) and its SHA-256, codec, decoded
                           shapes, the entry layout (every part's dtype, shape, byte offset inside an entry),
                           and per entry: shard, byte offset, bytes, SHA-256; per shard: bytes, SHA-256
      shard_00000.bin      entries back to back (runtime/cache_format.py: the layout of one entry)
      shard_00001.bin      ...

Every entry has the same layout (the codec and the shapes are static), so a device reads sample k by mapping its
shard and slicing [offset, offset + entry_bytes): nothing else of the file is touched. `CacheReader` is the one
reader every runtime uses: opening checks the format, the identity (a cache made for another model, plan or
schedule is refused), the layout against the codec, the number of entries and every shard's size; each read checks
that entry's SHA-256; `verify()` hashes whole shards.

`CacheWriter` takes entries already encoded (parts as numpy arrays; the encoders are host code, or a device
program). Writing is atomic: a shard is written under a temporary name and renamed when complete; the index is
written last, the same way. A cache without its index does not open.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from pathlib import Path

import numpy as np

from .cache_format import (CACHE_FORMAT, CACHE_FORMAT_VERSION, INDEX, X0, CacheCodec, entry_layout,
                           identity_digest)
from .errors import BundleError

DEFAULT_SHARD_BYTES = 64 << 20       # shards close at about this size (a sample never spans two)
NP_DTYPES = {"float32": np.float32, "float16": np.float16, "int8": np.int8, "uint8": np.uint8}


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CacheWriter:
    """CacheWriter(dir, identity, codec).add(0, {"x0": ..., "front.img.codes": ...}) ... .finish(extra) -> index."""

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

    def set_shapes(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """Decoded shapes {"x0": ..., "front.img": [B, N, D], ...}: fixes the entry layout."""
        shapes = {k: [int(s) for s in v] for k, v in shapes.items()}
        if self.layout is None:
            self.shapes = shapes
            self.layout, self.entry_size = entry_layout(self.codec, {k: tuple(v) for k, v in shapes.items()})
        elif shapes != self.shapes:
            raise ValueError(f"cache entry shapes {shapes} differ from the first entry's {self.shapes}")

    def add(self, index: int, parts: dict[str, np.ndarray]) -> None:
        if self.layout is None:
            raise ValueError("set_shapes() before the first add()")
        if index != len(self.entries):
            raise ValueError(f"cache entries must be added in order: got {index}, expected {len(self.entries)}")
        if set(parts) != set(self.layout):
            raise ValueError(f"cache entry {index}: parts {sorted(parts)} differ from the layout {sorted(self.layout)}")
        buf = bytearray(self.entry_size)
        for name, info in self.layout.items():
            arr = np.ascontiguousarray(parts[name], dtype=NP_DTYPES[info["dtype"]])
            if list(arr.shape) != info["shape"]:
                raise ValueError(f"cache entry {index}: part {name} has shape {list(arr.shape)}, layout {info['shape']}")
            raw = arr.tobytes()
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

    def finish(self, extra: dict | None = None) -> dict:
        """Close the last shard and write the index (with `extra` fields, e.g. the coding error)."""
        self._close_shard()
        index = {"format": CACHE_FORMAT, "format_version": CACHE_FORMAT_VERSION,
                 "identity": self.identity, "identity_sha256": identity_digest(self.identity),
                 "codec": self.codec.to_json(), "shapes": self.shapes, **(extra or {}), "layout": self.layout,
                 "entry_bytes": self.entry_size, "num_entries": len(self.entries),
                 "shards": self.shards, "entries": self.entries}
        atomic_write_text(self.dir / INDEX, json.dumps(index, indent=1))
        return index


class CacheReader:
    """len(reader); reader.read_encoded(k) -> {part: array} as stored, the entry's SHA-256 checked."""

    def __init__(self, directory: Path, identity: dict | None = None, expected_entries: int | None = None):
        self.dir = Path(directory)
        ipath = self.dir / INDEX
        if not ipath.is_file():
            raise BundleError(f"{ipath}: residual cache index missing")
        try:
            self.index = json.loads(ipath.read_text())
        except ValueError as e:
            raise BundleError(f"{ipath}: not valid JSON ({e})") from e
        try:
            self._check(ipath, identity, expected_entries)
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, BundleError):
                raise
            raise BundleError(f"{ipath}: malformed cache index ({type(e).__name__}: {e})") from e
        self._maps: dict[str, mmap.mmap] = {}

    def _check(self, ipath: Path, identity: dict | None, expected_entries: int | None) -> None:
        idx = self.index
        if idx.get("format") != CACHE_FORMAT or idx.get("format_version") != CACHE_FORMAT_VERSION:
            raise BundleError(f"{ipath}: format {idx.get('format')!r} version {idx.get('format_version')}, expected "
                              f"{CACHE_FORMAT!r} version {CACHE_FORMAT_VERSION}")
        if identity_digest(idx["identity"]) != idx["identity_sha256"]:
            raise BundleError(f"{ipath}: field identity does not match identity_sha256 (index edited or corrupt)")
        if identity is not None and idx["identity_sha256"] != identity_digest(identity):
            raise BundleError(f"{ipath}: cache was made for another model, plan or schedule (identity_sha256 "
                              f"{idx['identity_sha256'][:12]}.., expected {identity_digest(identity)[:12]}..)")
        self.codec = CacheCodec.parse(idx["codec"])
        self.shapes = {k: tuple(v) for k, v in idx["shapes"].items()}
        expect_layout, expect_bytes = entry_layout(self.codec, self.shapes)
        if expect_layout != idx["layout"] or expect_bytes != idx["entry_bytes"]:
            raise BundleError(f"{ipath}: field layout does not match codec {self.codec.spec} and shapes")
        self.layout = idx["layout"]
        n = len(idx["entries"])
        if n != idx["num_entries"] or (expected_entries is not None and n != expected_entries):
            raise BundleError(f"{ipath}: {n} entries, expected {expected_entries or idx['num_entries']}")
        for name, info in idx["shards"].items():
            p = self.dir / name
            if not p.is_file():
                raise BundleError(f"{p}: residual cache shard missing")
            if p.stat().st_size != info["bytes"]:
                raise BundleError(f"{p}: {p.stat().st_size} bytes, {INDEX} says {info['bytes']} (truncated or "
                                  f"overwritten)")
        for e in idx["entries"]:
            if e["shard"] not in idx["shards"] or e["bytes"] != idx["entry_bytes"] \
                    or e["offset"] + e["bytes"] > idx["shards"][e["shard"]]["bytes"]:
                raise BundleError(f"{ipath}: an entry points outside its shard ({e})")

    def __len__(self) -> int:
        return len(self.index["entries"])

    @property
    def entry_bytes(self) -> int:
        return int(self.index["entry_bytes"])

    def _map(self, shard: str) -> mmap.mmap:
        if shard not in self._maps:
            with open(self.dir / shard, "rb") as f:
                self._maps[shard] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._maps[shard]

    def read_encoded(self, index: int) -> dict[str, np.ndarray]:
        """One sample's stored parts ("x0", "front.img.codes", ...), checked against its SHA-256. The arrays own
        their memory (a copy of this sample's bytes only)."""
        e = self.index["entries"][index]
        raw = self._map(e["shard"])[e["offset"]:e["offset"] + e["bytes"]]
        if len(raw) != e["bytes"] or hashlib.sha256(raw).hexdigest() != e["sha256"]:
            raise BundleError(f"{self.dir / e['shard']}: entry {index} (bytes {e['offset']}..{e['offset'] + e['bytes']})"
                              f" does not match its SHA-256 in {INDEX} (corrupt)")
        buf = bytearray(raw)
        out = {}
        for name, info in self.layout.items():
            count = int(np.prod(info["shape"], dtype=np.int64))
            out[name] = np.frombuffer(buf, dtype=NP_DTYPES[info["dtype"]], count=count,
                                      offset=info["offset"]).reshape(info["shape"])
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


__all__ = ["CacheReader", "CacheWriter", "X0", "DEFAULT_SHARD_BYTES", "NP_DTYPES", "atomic_write_text"]
