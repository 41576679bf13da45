"""safetensors files written by the runtime: the trained LoRA and the training checkpoint.

Written here, not by the safetensors package, so that the same tensors always give the same bytes (its writer
orders the metadata dict differently from run to run). The format: 8-byte little-endian header length, the header
JSON ({"__metadata__": {...}, key: {"dtype", "shape", "data_offsets"}}, keys sorted, padded with spaces to a
multiple of 8), then the tensors' bytes in key order. Reading uses the safetensors package.

`write_lora`: the LoRA as the file diffusers' `load_lora_weights` reads, with the keys and `__metadata__` the
compiler recorded from `save_lora_weights` (manifest `lora_file`: name, keys, metadata).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from .errors import BundleError

_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}


def safetensors_bytes(tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> bytes:
    header: dict = {"__metadata__": {k: str(metadata[k]) for k in sorted(metadata)}}
    blobs, offset = [], 0
    for key in sorted(tensors):
        a = np.ascontiguousarray(tensors[key])
        if a.dtype not in _DTYPES:
            raise ValueError(f"tensor {key}: dtype {a.dtype} is not float32 / float16")
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[key] = {"dtype": _DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> Path:
    """Atomic: a temporary file, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(safetensors_bytes(tensors, metadata))
    os.replace(tmp, path)
    return path


def read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    from safetensors import safe_open
    with safe_open(str(path), "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})


def write_lora(out_dir: Path, params: dict[str, np.ndarray], keys: dict[str, str], lora_file: dict) -> Path:
    """params: {program parameter name: array}; keys: program parameter name -> LoRA file key; lora_file: the
    manifest's record."""
    tensors = {keys[n]: a for n, a in params.items()}
    if set(tensors) != set(lora_file["keys"]):
        missing = sorted(set(lora_file["keys"]) - set(tensors))[:3]
        raise BundleError(f"manifest.json: the program's trainable parameters do not match lora_file.keys "
                          f"(e.g. missing {missing})")
    return write_safetensors(Path(out_dir) / lora_file["name"], tensors, lora_file["metadata"])
