// Decoding latents in tiles as diffusers' autoencoders do with tiling on (ditskip_edge/runtime/tiling.py run_tiled /
// decode_tiled, tile by tile with two rows of results kept): tiles of T latent cells every S, each decoded tile
// blended into its upper then its left (already blended) neighbour over (T - S) f rows / columns (blend_rows /
// blend_cols in float32: above * float32(1 - y / e) + tile * float32(y / e)), its first S f rows and columns kept.
#pragma once

#include <functional>
#include <string>

#include "generate/floats.h"

namespace ditskip::generate {

std::string tile_key(int64_t tile_h, int64_t tile_w);     // "<h>x<w>" (generation.decode.programs' keys)

// tile [C, H, W] blended in place from `above` / `left` (diffusers' blend_v / blend_h).
void blend_rows(const Floats& above, Floats& tile, int64_t extent);
void blend_cols(const Floats& left, Floats& tile, int64_t extent);

// latents [1, C, h, w] -> image [1, 3, h f, w f]; decode_tile([1, C, th, tw]) -> [1, 3, th f, tw f].
Floats decode_tiled(const Floats& latents, const std::function<Floats(const Floats&)>& decode_tile, int64_t tile,
                    int64_t stride, int64_t scale);

}  // namespace ditskip::generate
