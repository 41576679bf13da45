"""The host's side of the residual-cache format: encode and write (with the coding error measured as it goes), and
read entries back as torch tensors. The format itself and the one reader are the runtime's
(`ditskip_edge/runtime/cache.py`); this module only adds torch.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..runtime.cache import CacheReader, CacheWriter
from ..runtime.cache_format import CacheCodec
from .codecs import decoder_for, encode_entry


class ResidualCacheWriter:
    """ResidualCacheWriter(dir, identity, codec).add(0, {"x0": ..., "front.img": ...}) ... .finish() -> index.
    Entries are fp32 torch tensors; they are encoded with the codec and the relative coding error
    ||d_hat - d|| / ||d|| of every residual is recorded in the index (`rel_error`: mean and max per residual)."""

    def __init__(self, directory: Path, identity: dict, codec: str | CacheCodec = "fp32", **kw):
        self.writer = CacheWriter(directory, identity, codec, **kw)
        self.codec = self.writer.codec
        self._decoder = None
        self.rel_errors: dict[str, list[float]] = {}

    def add(self, index: int, tensors: dict[str, torch.Tensor]) -> None:
        self.writer.set_shapes({k: tuple(v.shape) for k, v in tensors.items()})
        parts = encode_entry(self.codec, tensors)
        if self._decoder is None:
            self._decoder = decoder_for(self.codec, self.writer.shapes)
        with torch.no_grad():
            for name, d_hat in self._decoder(parts).items():
                d = tensors[name].detach().float()
                self.rel_errors.setdefault(name, []).append(float((d_hat - d).norm() / d.norm().clamp_min(1e-30)))
        self.writer.add(index, {k: v.detach().cpu().numpy() for k, v in parts.items()})

    def error_summary(self) -> dict:
        """{residual: {"mean", "max"}} of the relative error over the entries written so far."""
        return {k: {"mean": sum(v) / len(v), "max": max(v)} for k, v in self.rel_errors.items()}

    def finish(self) -> dict:
        return self.writer.finish({"rel_error": self.error_summary()})


def torch_entry(reader: CacheReader, index: int) -> dict[str, torch.Tensor]:
    """One sample's stored parts as torch tensors (SHA-256 checked by the reader)."""
    return {k: torch.from_numpy(v) for k, v in reader.read_encoded(index).items()}


def reader_decoder(reader: CacheReader) -> torch.nn.Module:
    """The in-graph decoder for what `reader` stores."""
    return decoder_for(reader.codec, reader.shapes)


def decoded_entry(reader: CacheReader, index: int) -> dict[str, torch.Tensor]:
    """One sample decoded on the host: {"x0": fp32, "front.img": fp32 [B, N, D], ...}."""
    enc = torch_entry(reader, index)
    with torch.no_grad():
        return {"x0": enc["x0"], **reader_decoder(reader)(enc)}
