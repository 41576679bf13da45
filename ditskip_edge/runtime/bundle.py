"""A bundle: a directory with manifest.json at its root listing every file with its SHA-256 and size.

The file layout (one name per file, used by the compiler that writes and every runtime that reads):

    manifest.json                              everything below, with SHA-256 and size; its own digest (below)
    model/kept_weights.safetensors             embedders, kept blocks, head (the eager runtime's weights)
    subject/schedule.json                      per sample: photo, t, crop box, noise seed
    subject/photos/NNN.png                     the normalised photos
    subject/text_conditioning.safetensors      the prompt's conditioning
    subject/cache/                             residual cache (runtime/cache.py)
    programs/<runtime>/...                     device programs, listed in the manifest's `programs`

The manifest verifies itself: its first line is `{"manifest_sha256": "<hex>",` and <hex> is the SHA-256 of every
byte after that line, so a change to any field (a learning rate, a rank) is refused like a changed file.

Writing is all-or-nothing: files go to a temporary sibling directory, the manifest is written last, and the
directory is renamed into place; on any error the temporary directory is removed, so a failed compile leaves no
half-written bundle. Reading checks the manifest's digest and every listed file's size and hash before anything
is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import BundleError, UserError
from .schedule import Schedule

MANIFEST = "manifest.json"
BUNDLE_FORMAT = "ditskip-edge-bundle"
BUNDLE_FORMAT_VERSION = 2          # 2: self-verifying manifest, one `programs` list for every runtime
MODEL_WEIGHTS = "model/kept_weights.safetensors"
SCHEDULE_FILE = "subject/schedule.json"
TEXT_FILE = "subject/text_conditioning.safetensors"
CACHE_DIR = "subject/cache"
PHOTOS_DIR = "subject/photos"
PROGRAMS_DIR = "programs"
DIGEST_KEY = "manifest_sha256"
_DIGEST_LINE = re.compile(rb'\A\{"manifest_sha256": "([0-9a-f]{64})",\n')


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class OptimizerSpec:
    """AdamW, as torch.optim.AdamW computes it (the reference for every runtime's own implementation)."""
    lr: float = 1e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 1e-4

    def to_json(self) -> dict:
        return {**asdict(self), "betas": list(self.betas)}

    @staticmethod
    def from_json(d: dict) -> "OptimizerSpec":
        return OptimizerSpec(lr=float(d["lr"]), betas=(float(d["betas"][0]), float(d["betas"][1])),
                             eps=float(d["eps"]), weight_decay=float(d["weight_decay"]))


# ---------------------------------------------------------------------------------------------- the manifest file

def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """The manifest as written: a first line carrying the SHA-256 of all the bytes after it."""
    body = json.dumps({k: v for k, v in manifest.items() if k != DIGEST_KEY}, indent=1).encode()
    rest = body[2:]                                   # after "{\n"
    return b'{"%s": "%s",\n' % (DIGEST_KEY.encode(), hashlib.sha256(rest).hexdigest().encode()) + rest


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    Path(path).write_bytes(manifest_bytes(manifest))


def parse_manifest(raw: bytes, where: Path) -> tuple[dict[str, Any], str]:
    """Check the digest line, then parse. Any edit after the first line, or to the digest itself, is refused.
    Returns the manifest (without its digest) and the digest."""
    m = _DIGEST_LINE.match(raw)
    if m is None:
        raise BundleError(f"{where}: first line is not {{\"{DIGEST_KEY}\": \"<64 hex digits>\", (not a bundle "
                          f"manifest of format version {BUNDLE_FORMAT_VERSION}, or edited)")
    if hashlib.sha256(raw[m.end():]).hexdigest() != m.group(1).decode():
        raise BundleError(f"{where}: contents do not match {DIGEST_KEY} (the manifest was edited or is corrupt)")
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise BundleError(f"{where}: not valid JSON ({e})") from e
    return manifest, manifest.pop(DIGEST_KEY)


def read_manifest(bundle_dir: str | Path, verify: bool = True) -> dict[str, Any]:
    return _read_manifest(bundle_dir, verify)[0]


def _read_manifest(bundle_dir: str | Path, verify: bool) -> tuple[dict[str, Any], str]:
    bundle_dir = Path(bundle_dir)
    mpath = bundle_dir / MANIFEST
    if not bundle_dir.is_dir():
        raise BundleError(f"bundle {bundle_dir} is not a folder")
    if not mpath.is_file():
        raise BundleError(f"{bundle_dir}: not a bundle (no {MANIFEST})")
    manifest, digest = parse_manifest(mpath.read_bytes(), mpath)
    if manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{mpath}: format is {manifest.get('format')!r}, expected {BUNDLE_FORMAT!r}")
    if manifest.get("format_version") != BUNDLE_FORMAT_VERSION:
        raise BundleError(f"{mpath}: format_version {manifest.get('format_version')} is not supported "
                          f"(this tool reads {BUNDLE_FORMAT_VERSION})")
    if verify:
        verify_files(bundle_dir, manifest)
    return manifest, digest


def verify_files(bundle_dir: Path, manifest: dict[str, Any], only: list[str] | None = None) -> None:
    for rel, info in manifest.get("files", {}).items():
        if only is not None and rel not in only:
            continue
        p = Path(bundle_dir) / rel
        if not p.is_file():
            raise BundleError(f"{p}: listed in the manifest but missing")
        if p.stat().st_size != info["bytes"]:
            raise BundleError(f"{p}: {p.stat().st_size} bytes, manifest says {info['bytes']}")
        if sha256_file(p) != info["sha256"]:
            raise BundleError(f"{p}: SHA-256 does not match the manifest (file changed or corrupt)")


class BundleWriter:
    """with BundleWriter(out_dir) as w: write files under w.root ...; w.manifest.update(...)  -> committed on exit."""

    def __init__(self, out_dir: str | Path, overwrite: bool = False):
        self.out_dir = Path(out_dir)
        if self.out_dir.exists() and not overwrite:
            raise UserError(f"{self.out_dir} already exists: choose another --out or pass --force")
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise UserError(f"{self.out_dir} exists and is not a folder")
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.root: Path | None = None
        self.manifest: dict[str, Any] = {"format": BUNDLE_FORMAT, "format_version": BUNDLE_FORMAT_VERSION}

    def __enter__(self) -> "BundleWriter":
        self.root = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.tmp-", dir=self.out_dir.parent))
        return self

    def path(self, rel: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def view(self) -> "Bundle":
        """The bundle as written so far (files unverified: their hashes are only taken on commit)."""
        return Bundle(self.root, dict(self.manifest))

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        try:
            files = {}
            for p in sorted(self.root.rglob("*")):
                if p.is_file():
                    rel = p.relative_to(self.root).as_posix()
                    files[rel] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
            self.manifest["files"] = files
            write_manifest(self.root / MANIFEST, self.manifest)
            if self.out_dir.exists():
                shutil.rmtree(self.out_dir)
            os.replace(self.root, self.out_dir)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise


def cache_identity(model: dict, plan: dict, schedule: Schedule) -> dict:
    """What a residual cache is computed for: the manifest's model and plan fields and the schedule
    (runtime/cache.py refuses a cache made for another)."""
    return {"model": model["name"], "transformer_config": model["transformer_config"],
            "plan": [plan["num_blocks"], plan["n_front"], plan["n_back"]], "schedule": schedule.to_json()}


# ------------------------------------------------------------------------------------------- an opened bundle

class Bundle:
    """A bundle as a runtime reads it: the verified manifest and typed access to what it names. numpy only."""

    def __init__(self, root: Path, manifest: dict[str, Any], manifest_sha256: str = ""):
        self.root = Path(root)
        self.manifest = manifest
        self.manifest_sha256 = manifest_sha256          # "" for a bundle still being written
        self._schedule: Schedule | None = None

    @staticmethod
    def open(bundle_dir: str | Path, verify: bool = True) -> "Bundle":
        root = Path(bundle_dir)
        return Bundle(root, *_read_manifest(root, verify))

    def field(self, *path: str):
        """manifest[path[0]][path[1]]..., or a BundleError naming the missing field."""
        node: Any = self.manifest
        for i, key in enumerate(path):
            if not isinstance(node, dict) or key not in node:
                raise BundleError(f"{self.root / MANIFEST}: missing field {'.'.join(path[:i + 1])}")
            node = node[key]
        return node

    def file_sha256(self, rel: str) -> str:
        files = self.field("files")
        if rel not in files:
            raise BundleError(f"{self.root / MANIFEST}: {rel} is not listed in files")
        return files[rel]["sha256"]

    @property
    def schedule(self) -> Schedule:
        if self._schedule is None:
            self._schedule = Schedule.load(self.root / self.field("subject_stage", "schedule"))
        return self._schedule

    @property
    def optimizer(self) -> OptimizerSpec:
        try:
            return OptimizerSpec.from_json(self.field("optimizer"))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise BundleError(f"{self.root / MANIFEST}: malformed field optimizer ({e})") from e

    @property
    def programs(self) -> list[dict]:
        programs = self.manifest.get("programs", [])
        if not isinstance(programs, list):
            raise BundleError(f"{self.root / MANIFEST}: field programs must be a list")
        return programs

    @property
    def cache_identity(self) -> dict:
        return cache_identity(self.field("model"), self.field("plan"), self.schedule)

    def text_conditioning(self) -> dict:
        """{key: float32 array}, as the compiler stored it (safetensors)."""
        from safetensors.numpy import load_file
        return load_file(str(self.root / self.field("subject_stage", "text_conditioning")))

    def cache(self):
        from .cache import CacheReader
        return CacheReader(self.root / self.field("subject_stage", "cache"), self.cache_identity,
                           expected_entries=self.schedule.num_samples)
