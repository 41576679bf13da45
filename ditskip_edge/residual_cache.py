"""The residual cache (kept importable under this name): see `ditskip_edge/cache/`.

An entry holds the sample's clean latents ("x0" [1, C, h, w], fp32) and the skipped spans' residuals
("front.img", "front.txt" for FLUX, "back.img"; each [1, N, D]) coded by the bundle's codec.
`CacheWriter(directory, identity, codec).add(index, tensors)` / `.finish()`;
`CacheReader(directory, identity)`: `len()`, `.read(index)` (decoded fp32), `.read_encoded(index)` (stored parts),
`.decoder()`; `decoder_for(codec_config, shapes)` is the in-graph decoder module.
"""

from .cache import (DEFAULT_CODEC, INDEX, CacheCodec, CacheReader, CacheWriter, decoder_for,  # noqa: F401
                    identity_digest)
