"""The residual cache: one entry per scheduled sample (clean latents + the skipped spans' residuals), compressed by a
codec chosen per bundle, stored in shards a device reads one sample at a time, decoded inside the training step.

- `codecs.py`: codec specs (fp32, fp16, int8, int4, low rank, per-residual overrides), host encoders and the
  exportable in-graph decoder (`decoder_for`).
- `store.py`: the on-disk format (`CacheWriter`, `CacheReader`).
- `quality.py`: what a codec costs and loses (bytes per sample, relative error), for cache-report and benchmarks.
"""

from .codecs import X0, CacheCodec, ResidualDecoder, TensorCodec, decoder_for, entry_bytes
from .store import CACHE_FORMAT, CACHE_FORMAT_VERSION, INDEX, CacheReader, CacheWriter, identity_digest

DEFAULT_CODEC = "int8-channel"     # provisional; set from benchmarks/results/cache_codecs.md

__all__ = ["X0", "CacheCodec", "ResidualDecoder", "TensorCodec", "decoder_for", "entry_bytes", "CACHE_FORMAT",
           "CACHE_FORMAT_VERSION", "INDEX", "CacheReader", "CacheWriter", "identity_digest", "DEFAULT_CODEC"]
