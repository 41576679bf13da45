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

`CacheWriter` takes entries already encoded (parts as numpy arrays; the encoders are the host's
`ditskip_edge/cache/codecs.py` or the device's `runtime/codecs.py`). Writing is atomic: a shard is written under a
temporary name and renamed when complete; the index is written last, the same way. A cache without its index does
not open.

Resumable writing (`CacheWriter(..., resumable=True)`, the device's subject stage): every entry is made durable as
it is added (shard bytes flushed and fsync'ed, then one line appended to `cache_journal.jsonl` and fsync'ed: the
entry's shard, offset, bytes, SHA-256 and the caller's extra fields); a closed shard adds a line too. A writer opened
on a folder that holds a journal continues it: the journal's first line must carry the same identity, codec, shapes
and run (else a UserError), the open shard is cut back to its last journalled entry (bytes written after it, by a
run killed mid-entry, are dropped), and `next_index` says which entry comes next: an entry that was journalled is
never computed again. `finish()` writes the index and removes the journal.
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
from .errors import BundleError, UserError

DEFAULT_SHARD_BYTES = 64 << 20       # shards close at about this size (a sample never spans two)
JOURNAL = "cache_journal.jsonl"
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
                 shard_bytes: int = DEFAULT_SHARD_BYTES, resumable: bool = False, run: str = ""):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.identity = identity
        self.codec = CacheCodec.parse(codec)
        self.shard_bytes = shard_bytes
        self.shapes: dict[str, list[int]] = {}
        self.layout: dict | None = None
        self.entry_size = 0
        self.entries: list[dict] = []
        self.extras: list[dict] = []            # the caller's per-entry fields (journalled: they survive a resume)
        self.shards: dict[str, dict] = {}
        self._f = None
        self._name = ""
        self._hash = None
        self._pos = 0
        self.resumable, self.run = resumable, run
        self._journal = None
        self.resumed_entries = 0

    @property
    def next_index(self) -> int:
        return len(self.entries)

    def _header(self) -> dict:
        return {"identity_sha256": identity_digest(self.identity), "codec": self.codec.spec, "shapes": self.shapes,
                "shard_bytes": self.shard_bytes, "run": self.run}

    def set_shapes(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """Decoded shapes {"x0": ..., "front.img": [B, N, D], ...}: fixes the entry layout. A resumable writer then
        continues the folder's journal, if it has one (see the module docstring)."""
        shapes = {k: [int(s) for s in v] for k, v in shapes.items()}
        if self.layout is None:
            self.shapes = shapes
            self.layout, self.entry_size = entry_layout(self.codec, {k: tuple(v) for k, v in shapes.items()})
            if self.resumable:
                self._resume_or_start()
        elif shapes != self.shapes:
            raise ValueError(f"cache entry shapes {shapes} differ from the first entry's {self.shapes}")

    # ----------------------------------------------------------------------------------------- the journal
    def _journal_append(self, record: dict) -> None:
        self._journal.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())

    def _resume_or_start(self) -> None:
        path = self.dir / JOURNAL
        lines, durable_bytes = [], 0
        if path.is_file():
            data = path.read_bytes()
            for raw in data.split(b"\n")[:-1]:   # complete lines only: a last line without its newline is torn
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    break                        # a line torn by a kill: what follows it was never durable
                durable_bytes += len(raw) + 1
            if durable_bytes < len(data):        # cut the torn tail off, so new lines follow the last durable one
                with open(path, "r+b") as f:
                    f.truncate(durable_bytes)
        if not lines:
            for stale in self.dir.glob("shard_*"):
                stale.unlink()
            self._journal = open(path, "w")
            self._journal_append({"header": self._header()})
            return
        header = lines[0].get("header")
        if header != self._header():
            raise UserError(f"{path}: an interrupted residual cache for other inputs (model bundle, photos, prompt, "
                            f"codec or schedule differ): delete {self.dir.parent.parent} or pass --no-resume")
        for rec in lines[1:]:
            if "entry" in rec:
                self.entries.append(rec["entry"])
                self.extras.append(rec.get("extra", {}))
            elif "shard" in rec:
                self.shards[rec["shard"]] = {"bytes": rec["bytes"], "sha256": rec["sha256"]}
        # the shard still open when the run stopped: cut it back to its last journalled entry and reopen it
        open_entries = [e for e in self.entries if e["shard"] not in self.shards]
        if open_entries:
            self._name = open_entries[0]["shard"]
            tmp, final = self.dir / (self._name + ".tmp"), self.dir / self._name
            if not tmp.is_file() and final.is_file():      # renamed, but the close was not journalled
                os.replace(final, tmp)
            end = open_entries[-1]["offset"] + open_entries[-1]["bytes"]
            if not tmp.is_file() or tmp.stat().st_size < end:
                raise BundleError(f"{tmp}: shorter than its journal says ({end} bytes): the cache in progress is "
                                  f"damaged; delete {self.dir.parent.parent} or pass --no-resume")
            self._f = open(tmp, "r+b")
            self._f.truncate(end)
            self._f.seek(0)
            self._hash = hashlib.sha256()
            remaining = end
            while remaining:
                block = self._f.read(min(remaining, 1 << 20))
                self._hash.update(block)
                remaining -= len(block)
            self._f.seek(end)
            self._pos = end
        for stale in self.dir.glob("shard_*"):             # shards begun after the last journalled entry
            name = stale.name.removesuffix(".tmp")
            if name not in self.shards and name != (self._name if open_entries else ""):
                stale.unlink()
        self.resumed_entries = len(self.entries)
        self._journal = open(path, "a")

    def add(self, index: int, parts: dict[str, np.ndarray], extra: dict | None = None) -> None:
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
        entry = {"shard": self._name, "offset": self._pos, "bytes": self.entry_size,
                 "sha256": hashlib.sha256(buf).hexdigest()}
        self.entries.append(entry)
        self.extras.append(extra or {})
        self._pos += self.entry_size
        if self._journal is not None:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._journal_append({"entry": entry, "extra": extra or {}})

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
        if self._journal is not None:
            self._journal_append({"shard": self._name, **self.shards[self._name]})

    def finish(self, extra: dict | None = None) -> dict:
        """Close the last shard and write the index (with `extra` fields, e.g. the coding error)."""
        self._close_shard()
        index = {"format": CACHE_FORMAT, "format_version": CACHE_FORMAT_VERSION,
                 "identity": self.identity, "identity_sha256": identity_digest(self.identity),
                 "codec": self.codec.to_json(), "shapes": self.shapes, **(extra or {}), "layout": self.layout,
                 "entry_bytes": self.entry_size, "num_entries": len(self.entries),
                 "shards": self.shards, "entries": self.entries}
        atomic_write_text(self.dir / INDEX, json.dumps(index, indent=1))
        if self._journal is not None:
            self._journal.close()
            self._journal = None
            (self.dir / JOURNAL).unlink()
        return index

    def close(self) -> None:
        """Stop without finishing (the journal and the open shard stay for a resumable writer)."""
        for f in (self._f, self._journal):
            if f is not None:
                f.close()
        self._f = self._journal = None


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


__all__ = ["CacheReader", "CacheWriter", "X0", "DEFAULT_SHARD_BYTES", "JOURNAL", "NP_DTYPES", "atomic_write_text"]
