"""Frozen weights for generation: a memory-mapped safetensors file, and the trained LoRA merged into it at the
weights' bit width (numpy only).

A phone counts dirty anonymous memory, not clean file-backed pages (DEVICE_MEMORY.md), so the block programs take
their weights as inputs that the runtime maps from the bundle's file and hands over in place: the programs are
exported with unplanned graph inputs (ExecuTorch then points at the caller's memory instead of copying it into
its arena), and `MappedWeights.array` returns copy-on-write views of the file (np.memmap mode "c": writable for
the bindings, never written, so the pages stay clean and file-backed).

Layouts (ditskip_edge/quantize.py, per nn.Linear; convolutions alike over their flattened weight):
    fp32   weight  float32 [O, I]
    int8   w_codes int8 [O, I],          w_scale float32 [O, 1]          symmetric per output channel
    int4   w_packed uint8 [O, I/2],      w_scale float32 [O, I/g, 1]     symmetric per group of g inputs, codes
                                                                         offset by 8, low nibble = even column
Quantization is torchao's symmetric rule as quantize.py calls it: scale = max|w| / ((qmax - qmin) / 2), at least
1e-12; code = clamp(round(w * (1 / scale)), qmin, qmax) with round half to even, in float32.

`merge_lora`: W' = dequantize(W) + (alpha / rank) B A, requantized with the same rule and layout: what the device
does after training, so the merged weights have the bundle's bit width and the block programs stay as they are.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from .errors import BundleError

ST_DTYPES = {"F32": np.dtype(np.float32), "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8),
             "I64": np.dtype(np.int64)}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}
QMAX = {8: 127, 4: 7}
SCALE_EPS = np.float32(1e-12)


class MappedWeights:
    """A safetensors file mapped once; `array(key)` is a view of its bytes (no copy, nothing read until used)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise BundleError(f"{self.path}: weights file missing")
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise BundleError(f"{self.path}: not a safetensors file (truncated header)")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise BundleError(f"{self.path}: not a safetensors file (header length {n} > file size)")
            header = json.loads(f.read(n))
        self.metadata = header.pop("__metadata__", {}) or {}
        self.entries = header
        self.data_offset = 8 + n
        self._map = np.memmap(self.path, np.uint8, mode="c") if size > self.data_offset else np.zeros(0, np.uint8)

    def keys(self):
        return self.entries.keys()

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def array(self, key: str) -> np.ndarray:
        e = self.entries.get(key)
        if e is None:
            raise BundleError(f"{self.path}: no tensor {key!r}")
        dtype = ST_DTYPES.get(e["dtype"])
        if dtype is None:
            raise BundleError(f"{self.path}: tensor {key} has dtype {e['dtype']}, expected one of {list(ST_DTYPES)}")
        start, end = e["data_offsets"]
        raw = self._map[self.data_offset + start:self.data_offset + end]
        return raw.view(dtype).reshape(e["shape"])


def write_weights(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> Path:
    """safetensors with the widest dtypes first (so every float32 tensor starts 4-byte aligned: the header is padded
    to 8), written to a temporary file and renamed."""
    layout = {k: (np.asarray(v).dtype, tuple(np.shape(v))) for k, v in tensors.items()}
    return write_weights_streamed(path, layout, metadata, tensors.items())


def write_weights_streamed(path: Path, layout: dict[str, tuple], metadata: dict[str, str], arrays) -> Path:
    """`write_weights` for tensors that arrive one at a time: `layout` {key: (dtype, shape)} fixes the header, each
    (key, array) from `arrays` is written at its offset as it comes (in any order) and can be dropped after, so at
    most one tensor is held. Every key exactly once, with its layout's dtype and shape; otherwise nothing is left
    behind but the error."""
    order = sorted(layout, key=lambda k: (-np.dtype(layout[k][0]).itemsize, k))
    header: dict = {"__metadata__": {k: str(metadata[k]) for k in sorted(metadata)}}
    offset = 0
    for key in order:
        dtype, shape = np.dtype(layout[key][0]), [int(d) for d in layout[key][1]]
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        header[key] = {"dtype": ST_NAMES[dtype], "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    base = 8 + len(text)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    written: set[str] = set()
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            f.truncate(base + offset)
            for key, a in arrays:
                e = header.get(key) if key != "__metadata__" else None
                a = np.ascontiguousarray(a)
                if e is None or key in written or ST_NAMES.get(a.dtype) != e["dtype"] or list(a.shape) != e["shape"]:
                    raise BundleError(f"{path}: tensor {key!r} {a.dtype}{list(a.shape)} is not in the layout "
                                      f"(or came twice)")
                f.seek(base + e["data_offsets"][0])
                f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
                written.add(key)
        missing = set(layout) - written
        if missing:
            raise BundleError(f"{path}: tensors {sorted(missing)[:3]} were never written")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


# ------------------------------------------------------------------------------------- quantization, in numpy

def _symmetric(w: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """w [..., G] float32 -> (codes int8 [..., G], scale float32 [..., 1]), one scale per last-axis group."""
    qmax, qmin = QMAX[bits], -QMAX[bits] - 1
    max_abs = np.maximum(-np.minimum(w.min(-1, keepdims=True), 0), np.maximum(w.max(-1, keepdims=True), 0))
    scale = np.maximum(max_abs / np.float32((qmax - qmin) / 2), SCALE_EPS).astype(np.float32)
    codes = np.clip(np.round(w * (np.float32(1.0) / scale)), qmin, qmax).astype(np.int8)
    return codes, scale


def quantize_linear(w: np.ndarray, precision: str, group: int = 32) -> dict[str, np.ndarray]:
    """A linear's weight [O, I] in the layout of `precision` (module docstring)."""
    w = np.asarray(w, np.float32)
    o, i = w.shape
    if precision == "fp32":
        return {"weight": w}
    if precision == "int8":
        codes, scale = _symmetric(w, 8)
        return {"w_codes": codes, "w_scale": scale.reshape(o, 1)}
    if precision == "int4":
        g = group if i % group == 0 else i
        codes, scale = _symmetric(w.reshape(o, i // g, g), 4)
        u = (codes.reshape(o, i).astype(np.int16) + 8).astype(np.uint8)
        return {"w_packed": (u[:, 0::2] + u[:, 1::2] * 16).astype(np.uint8), "w_scale": scale.reshape(o, i // g, 1)}
    raise BundleError(f"precision {precision!r}: expected fp32, int8 or int4")


def dequantize_linear(states: dict[str, np.ndarray]) -> np.ndarray:
    """The float32 weight [O, I] of a linear stored in any of the layouts."""
    if "weight" in states:
        return np.asarray(states["weight"], np.float32)
    if "w_codes" in states:
        return states["w_codes"].astype(np.float32) * states["w_scale"]
    packed, scale = states["w_packed"], states["w_scale"]
    o, half = packed.shape
    p = packed.astype(np.int32)
    q = np.stack([p % 16, p // 16], axis=-1).reshape(o, 2 * half).astype(np.float32) - np.float32(8.0)
    g = 2 * half // scale.shape[1]
    return (q.reshape(o, -1, g) * scale).reshape(o, 2 * half)


def precision_of(states: dict[str, np.ndarray]) -> str:
    return "fp32" if "weight" in states else "int8" if "w_codes" in states else "int4"


def merge_lora(states: dict[str, np.ndarray], lora_a: np.ndarray, lora_b: np.ndarray, scale: float) -> dict:
    """The linear's weight states with B A merged in at their own bit width (fp32: plain sum)."""
    w = dequantize_linear(states)
    delta = (np.float32(scale) * (lora_b.astype(np.float32) @ lora_a.astype(np.float32))).astype(np.float32)
    if delta.shape != w.shape:
        raise BundleError(f"LoRA B @ A has shape {list(delta.shape)}, the frozen weight {list(w.shape)}")
    precision = precision_of(states)
    group = w.shape[1] // states["w_scale"].shape[1] if precision == "int4" else 32
    return quantize_linear(w + delta, precision, group)
