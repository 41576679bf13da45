"""The host's program cache: exported programs kept between compiles, keyed by what they are made of (not the
bundle's residual cache).

Lowering a traced graph to an ExecuTorch program (to_edge, the XNNPACK partitioning, to_executorch, the memory
plan) is most of a compile's time, and it gives the same bytes for the same input: compiling a second subject on
the same model, or `make demo` a second time, lowers the same training, forward and generation programs again.
An exporter traces its module (torch.export), then asks

    files, meta = ProgramCache.from_env().program(kind, ep, options, build)

which returns the stored program when there is one and otherwise runs `build()` (the lowering: -> ({file name:
bytes}, JSON-able meta)) and stores what it returns. The key is the SHA-256 of
  - the traced graph, before any of export/'s passes: every graph module's code, every node's shape / dtype /
    strides, the graph signature;
  - every constant's name, shape, dtype and bytes (frozen weights, LoRA initial values, quantized codes, scales);
  - the caller's options (`repr`: the export config), the torch / executorch / torchao versions and the source of
    every file in export/ and ditskip_edge/ (the passes, the lowering and the memory report run after the key is
    taken);
so a changed weight, shape, option, library or pass is another key. A graph with a constant that is not a plain
tensor (a tensor subclass, a script object, a meta tensor) is not cached.

An entry is a folder: its files and `entry.json` with each file's SHA-256; an entry whose bytes do not match is
removed and rebuilt, never used. Entries are written into a temporary folder and renamed into place, so two
compiles at once (compile --jobs 2, or two users of one cache) never read half an entry. The cache is capped
(`cap_bytes`, entries used longest ago removed first) and a program above a quarter of the cap is not stored (the
real-scale programs' weight files are gigabytes). A cache that cannot be written is a warning, not a failed compile.

    DITSKIP_EDGE_PROGRAM_CACHE        a folder, or "off"; default $XDG_CACHE_HOME/ditskip-edge/programs
                                      (~/.cache/ditskip-edge/programs)
    DITSKIP_EDGE_PROGRAM_CACHE_BYTES  the cap, default 2 GiB
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger(__name__)
ENV_DIR, ENV_CAP = "DITSKIP_EDGE_PROGRAM_CACHE", "DITSKIP_EDGE_PROGRAM_CACHE_BYTES"
DEFAULT_CAP_BYTES = 2 << 30
ENTRY = "entry.json"
PTE_FILE = "program.pte"                  # an entry's program; its other files are the exporter's to name
TMP_DIR = "tmp"
FORMAT = 1


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ditskip-edge" / "programs"


@functools.cache
def _toolchain_digest() -> str:
    """Library versions and the source of export/ and ditskip_edge/ (what runs between the key and the stored
    program: the passes, the lowering, and the memory report's traced step, which runs the model's views and the
    memory tracker)."""
    from importlib.metadata import PackageNotFoundError, version
    h = hashlib.sha256(f"format {FORMAT}".encode())
    for pkg in ("torch", "executorch", "torchao"):
        try:
            h.update(f"{pkg} {version(pkg)}\n".encode())
        except PackageNotFoundError:
            h.update(f"{pkg} -\n".encode())
    root = Path(__file__).resolve().parent.parent
    for package in ("export", "ditskip_edge"):
        for path in sorted((root / package).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _value_record(val) -> str:
    if isinstance(val, torch.Tensor):
        return f"T{tuple(val.shape)}{val.dtype}{tuple(val.stride())}"
    if isinstance(val, (list, tuple)):
        return "(" + ",".join(_value_record(v) for v in val) + ")"
    return type(val).__name__ if val is not None else "-"


def _constant_bytes(t):
    """The tensor's bytes as a flat uint8 numpy view (hashed in place, no copy of a contiguous weight), or None."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.device.type != "cpu":
        return None
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()


def program_key(kind: str, ep, options) -> str | None:
    """The SHA-256 key of a traced program (torch.export's ExportedProgram) lowered by `kind` with `options`; None
    when a constant is not a plain CPU tensor."""
    h = hashlib.sha256(f"{kind}\0{options!r}\0{_toolchain_digest()}\0".encode())
    for name, gm in ep.graph_module.named_modules():
        if isinstance(gm, torch.fx.GraphModule):
            h.update(f"module {name}\n{gm.code}\n".encode())
            for n in gm.graph.nodes:
                h.update(f"{n.op}|{n.name}|{n.target}|{_value_record(n.meta.get('val'))}\n".encode())
    h.update(str(ep.graph_signature).encode())
    for group, tensors in (("state", ep.state_dict), ("const", ep.constants)):
        for name in sorted(tensors):
            t = tensors[name]
            raw = _constant_bytes(t)
            if raw is None:
                return None
            h.update(f"{group} {name} {tuple(t.shape)} {t.dtype} {len(raw)}\n".encode())
            h.update(raw)
    return h.hexdigest()


class ProgramCache:
    """A folder of lowered programs (see the module docstring); root None: off (every program is built)."""

    def __init__(self, root: Path | None, cap_bytes: int = DEFAULT_CAP_BYTES):
        self.root = Path(root) if root is not None else None
        self.cap_bytes = int(cap_bytes)
        self.hits = self.misses = 0

    @classmethod
    def from_env(cls) -> "ProgramCache":
        return cls.at(os.environ.get(ENV_DIR) or str(default_dir()))

    @classmethod
    def at(cls, where: str) -> "ProgramCache":
        """The cache in folder `where` ("off": none) with the environment's cap, shared within the process."""
        cap_text = os.environ.get(ENV_CAP) or str(DEFAULT_CAP_BYTES)
        if not cap_text.isdigit():
            from ditskip_edge.runtime.errors import UserError
            raise UserError(f"{ENV_CAP}={cap_text!r}: expected a number of bytes")
        return _shared(None if where.lower() == "off" else where, int(cap_text))

    def program(self, kind: str, ep, options, build: Callable[[], tuple[dict[str, bytes], dict]]
                ) -> tuple[dict[str, bytes], dict]:
        """The program `build()` makes from `ep` (a dict of file name -> bytes, and its JSON-able meta), from the
        cache when it holds it."""
        key = program_key(kind, ep, options) if self.root is not None else None
        if key is not None:
            found = self.get(key)
            if found is not None:
                self.hits += 1
                log.info("program cache: %s read from %s", kind, self.root)
                return found
        self.misses += 1
        files, meta = build()
        meta = json.loads(json.dumps(meta))          # the types a stored entry gives back (tuples as lists)
        if key is not None:
            self.put(key, kind, files, meta)
        return files, meta

    def _entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> tuple[dict[str, bytes], dict] | None:
        folder = self._entry(key)
        try:
            record = json.loads((folder / ENTRY).read_text())
            files = {}
            for name, want in record["files"].items():
                data = (folder / name).read_bytes()
                if hashlib.sha256(data).hexdigest() != want["sha256"]:
                    raise ValueError(f"{name} does not match its SHA-256")
                files[name] = data
            os.utime(folder / ENTRY)                       # used now: the last to go when the cap is reached
            return files, record["meta"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("program cache: entry %s unusable (%s): removed, the program is exported again", folder, e)
            shutil.rmtree(folder, ignore_errors=True)
            return None

    def put(self, key: str, kind: str, files: dict[str, bytes], meta: dict) -> None:
        size = sum(len(b) for b in files.values())
        if size > self.cap_bytes // 4:
            log.info("program cache: %s not stored (%d bytes, over a quarter of the %d-byte cap)", kind, size,
                     self.cap_bytes)
            return
        if any("/" in name or name in (ENTRY, "", ".", "..") for name in files):
            raise ValueError(f"program cache: bad file names {sorted(files)}")
        tmp = self.root / TMP_DIR / f"{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        try:
            tmp.mkdir(parents=True)
            for name, data in files.items():
                (tmp / name).write_bytes(data)
            record = {"format": FORMAT, "kind": kind, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                      "files": {n: {"sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)}
                                for n, b in files.items()},
                      "meta": meta}
            (tmp / ENTRY).write_text(json.dumps(record))
            final = self._entry(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(tmp, final)
            except OSError:                                # another process stored it first: keep theirs
                shutil.rmtree(tmp, ignore_errors=True)
            self.evict()
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            log.warning("program cache: cannot write %s (%s); the compile goes on without it", self.root, e)

    def entries(self) -> list[tuple[float, int, Path]]:
        """(last used, bytes, folder) of every complete entry."""
        out = []
        if self.root is None or not self.root.is_dir():
            return out
        for record in self.root.glob(f"??/*/{ENTRY}"):
            try:
                used = record.stat().st_mtime
                size = sum(p.stat().st_size for p in record.parent.iterdir())
            except OSError:                                # removed meanwhile by another process
                continue
            out.append((used, size, record.parent))
        return out

    def summary(self) -> dict:
        """Where the cache is, its cap, and its entries and bytes, in all and per kind of program."""
        by_kind: dict[str, dict[str, int]] = {}
        for _, size, folder in self.entries():
            try:
                kind = json.loads((folder / ENTRY).read_text()).get("kind", "?")
            except (OSError, ValueError):
                kind = "?"
            k = by_kind.setdefault(kind, {"entries": 0, "bytes": 0})
            k["entries"] += 1
            k["bytes"] += size
        return {"dir": None if self.root is None else str(self.root), "cap_bytes": self.cap_bytes,
                "entries": sum(k["entries"] for k in by_kind.values()),
                "bytes": sum(k["bytes"] for k in by_kind.values()), "by_kind": dict(sorted(by_kind.items()))}

    def clear(self) -> int:
        """Remove every entry (and any half-written one); returns how many complete entries there were."""
        n = len(self.entries())
        if self.root is not None and self.root.is_dir():
            for child in self.root.iterdir():
                if child.is_dir() and (len(child.name) == 2 or child.name == TMP_DIR):
                    shutil.rmtree(child, ignore_errors=True)
        return n

    def evict(self) -> None:
        """Remove the entries used longest ago until the cache is within its cap."""
        entries = sorted(self.entries())
        total = sum(size for _, size, _ in entries)
        for _, size, folder in entries:
            if total <= self.cap_bytes:
                break
            shutil.rmtree(folder, ignore_errors=True)
            total -= size


@functools.cache
def _shared(root: str | None, cap_bytes: int) -> ProgramCache:
    """One ProgramCache per folder and cap in a process, so its hit / miss counts add up over a compile."""
    return ProgramCache(Path(root) if root else None, cap_bytes)
