"""The residual cache: one entry per scheduled sample, written by the host, read one sample at a time.

An entry holds the sample's clean latents ("x0" [1, C, h, w]) and the skipped spans' residuals
("front.img", "front.txt" for FLUX, "back.img"; each [1, N, D]). This module stores entries uncompressed
(fp32 safetensors, one file per sample); `cache_index.json` records the identity (model, plan, schedule) the cache
was made for, and reading refuses another identity.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .errors import BundleError

INDEX = "cache_index.json"


def identity_digest(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


class CacheWriter:
    def __init__(self, directory: Path, identity: dict):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.identity = identity
        self.entries: list[str] = []
        self.shapes: dict[str, list[int]] = {}

    def add(self, index: int, tensors: dict[str, torch.Tensor]) -> None:
        if index != len(self.entries):
            raise ValueError(f"cache entries must be added in order: got {index}, expected {len(self.entries)}")
        name = f"sample_{index:06d}.safetensors"
        save_file({k: v.detach().float().contiguous() for k, v in tensors.items()}, str(self.dir / name))
        self.entries.append(name)
        self.shapes = {k: list(v.shape) for k, v in tensors.items()}

    def finish(self) -> dict:
        index = {"codec": "fp32", "identity": self.identity, "identity_sha256": identity_digest(self.identity),
                 "entries": self.entries, "shapes": self.shapes}
        (self.dir / INDEX).write_text(json.dumps(index, indent=1))
        return index


class CacheReader:
    def __init__(self, directory: Path, identity: dict | None = None):
        self.dir = Path(directory)
        ipath = self.dir / INDEX
        if not ipath.is_file():
            raise BundleError(f"{ipath}: residual cache index missing")
        self.index = json.loads(ipath.read_text())
        if identity is not None and self.index["identity_sha256"] != identity_digest(identity):
            raise BundleError(f"{ipath}: cache was made for another model, plan or schedule")

    def __len__(self) -> int:
        return len(self.index["entries"])

    def read(self, index: int) -> dict[str, torch.Tensor]:
        return load_file(str(self.dir / self.index["entries"][index]))
