// The subject stage's crop-and-resize and tiled encode loop, data only (no programs):
// - crop_patch: ditskip_edge/runtime/patches.py (PatchSampler's grid_sample, bilinear, border padding,
//   align_corners=False) with its float32 steps, so the patch equals numpy's bit for bit;
// - run_tiled: tiling.py run_tiled with by_shape (every tile of one shape run before the next shape's program
//   loads), diffusers' linear blend into the upper then the left neighbour, in float32 as numpy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "subject/codecs.h"

namespace ditskip {

// photo [3, H, W] float32, crop box (x0_px, y0_px, side_px) -> [1, 3, out_px, out_px]
FloatTensor crop_patch(const float* photo_chw, int64_t height, int64_t width, const int64_t crop_box[3],
                       int64_t out_px);

// tiling.py tile_key / tile_shapes
std::string tile_key(int64_t h, int64_t w);
std::vector<std::pair<int64_t, int64_t>> tile_shapes(int64_t h, int64_t w, int64_t tile, int64_t stride);

// tiling.py encode_tiled(patch, None, tile_px, stride_px, scale, encode_shape=...): run_shape gets every tile of one
// shape ([1, C, th, tw] each, row-major order) and returns their results.
using RunShape = std::function<std::vector<FloatTensor>(const std::vector<FloatTensor>&)>;
FloatTensor encode_tiled(const FloatTensor& patch, int64_t tile_px, int64_t stride_px, int64_t scale,
                         const RunShape& run_shape);

}  // namespace ditskip
