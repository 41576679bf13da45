"""The residual cache on the host: one entry per scheduled sample (clean latents + the skipped spans' residuals),
compressed by a codec chosen per bundle, stored in shards a device reads one sample at a time, decoded inside the
training step.

- `ditskip_edge/runtime/cache_format.py`, `runtime/cache.py`: the format, the one reader and the byte writer
  (what a device needs, numpy only).
- `codecs.py`: host encoders and the exportable in-graph decoder (`decoder_for`).
- `store.py`: encode + write with the coding error recorded (`ResidualCacheWriter`); entries as torch tensors.
- `quality.py`: what a codec costs and loses (bytes per sample, relative error, loss change), for cache-report.
"""

# The default, from benchmarks/results/cache_codecs.md: int8 with per-channel scales on the image streams (<= 0.6%
# error), the FLUX text stream (nearly rank-deficient: most of its tokens are padding) as an int8 rank-16 product.
# Compile warns when a residual's coding error exceeds 5% (e.g. a text stream that is not low-rank).
DEFAULT_CODEC = "int8-channel,front.txt=lowrank-r16"
# A model bundle's cache is written on the phone by the native core, which has no SVD that matches numpy's and refuses
# lowrank codecs: its default is int8 with per-channel scales on every stream (the text stream then takes
# about 4x the bytes of lowrank-r16's at FLUX.1-dev's 512 tokens; cache_codecs.md).
DEFAULT_DEVICE_CODEC = "int8-channel"
