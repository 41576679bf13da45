"""A bundle: a directory with manifest.json at its root listing every file with its SHA-256 and size.

Writing is all-or-nothing: files go to a temporary sibling directory, the manifest is written last, and the
directory is renamed into place; on any error the temporary directory is removed, so a failed compile leaves
no half-written bundle. Reading checks every listed file's size and hash before anything is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .errors import BundleError, UserError

MANIFEST = "manifest.json"
BUNDLE_FORMAT = "ditskip-edge-bundle"
BUNDLE_FORMAT_VERSION = 1


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()


class BundleWriter:
    """with BundleWriter(out_dir) as w: write files under w.root ...; w.manifest.update(...)  -> committed on exit."""

    def __init__(self, out_dir: str | Path, overwrite: bool = False):
        self.out_dir = Path(out_dir)
        if self.out_dir.exists() and not overwrite:
            raise UserError(f"{self.out_dir} already exists: choose another --out or pass --force")
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.overwrite = overwrite
        self.root: Path | None = None
        self.manifest: dict[str, Any] = {"format": BUNDLE_FORMAT, "format_version": BUNDLE_FORMAT_VERSION}

    def __enter__(self) -> "BundleWriter":
        self.root = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.tmp-", dir=self.out_dir.parent))
        return self

    def path(self, rel: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

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
            (self.root / MANIFEST).write_text(json.dumps(self.manifest, indent=1))
            if self.out_dir.exists():
                shutil.rmtree(self.out_dir)
            os.replace(self.root, self.out_dir)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise


def read_manifest(bundle_dir: str | Path, verify: bool = True) -> dict[str, Any]:
    bundle_dir = Path(bundle_dir)
    mpath = bundle_dir / MANIFEST
    if not mpath.is_file():
        raise BundleError(f"{bundle_dir}: not a bundle (no {MANIFEST})")
    try:
        manifest = json.loads(mpath.read_text())
    except ValueError as e:
        raise BundleError(f"{mpath}: not valid JSON ({e})") from e
    if manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{mpath}: format is {manifest.get('format')!r}, expected {BUNDLE_FORMAT!r}")
    if manifest.get("format_version") != BUNDLE_FORMAT_VERSION:
        raise BundleError(f"{mpath}: format_version {manifest.get('format_version')} is not supported "
                          f"(this tool reads {BUNDLE_FORMAT_VERSION})")
    if verify:
        verify_files(bundle_dir, manifest)
    return manifest


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
