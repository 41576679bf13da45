"""The residual cache: one entry per scheduled sample (clean latents + the skipped spans' residuals), compressed by a
codec chosen per bundle, stored in shards a device reads one sample at a time, decoded inside the training step.

- `codecs.py`: codec specs (fp32, fp16, int8, int4, low rank, per-residual overrides), host encoders and the
  exportable in-graph decoder (`decoder_for`).
- `store.py`: the on-disk format (`CacheWriter`, `CacheReader`).
- `quality.py`: what a codec costs and loses (bytes per sample, relative error), for cache-report and benchmarks.
"""

from .codecs import X0, CacheCodec, ResidualDecoder, TensorCodec, decoder_for, entry_bytes
from .store import CACHE_FORMAT, CACHE_FORMAT_VERSION, INDEX, CacheReader, CacheWriter, identity_digest

# The default, from benchmarks/results/cache_codecs.md: int8 with per-channel scales on the image streams (<= 0.6%
# error), the FLUX text stream (nearly rank-deficient: most of its tokens are padding) as an int8 rank-16 product.
# Compile warns when a residual's coding error exceeds 5% (e.g. a text stream that is not low-rank).
DEFAULT_CODEC = "int8-channel,front.txt=lowrank-r16"

__all__ = ["X0", "CacheCodec", "ResidualDecoder", "TensorCodec", "decoder_for", "entry_bytes", "CACHE_FORMAT",
           "CACHE_FORMAT_VERSION", "INDEX", "CacheReader", "CacheWriter", "identity_digest", "DEFAULT_CODEC"]
