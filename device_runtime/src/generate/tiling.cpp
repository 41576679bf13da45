// tiling.py run_tiled (tile by tile) and decode_tiled, operation for operation (see tiling.h).
#include "generate/tiling.h"

#include <algorithm>
#include <vector>

#include "util/failure.h"

namespace ditskip::generate {

std::string tile_key(int64_t tile_h, int64_t tile_w) { return std::to_string(tile_h) + "x" + std::to_string(tile_w); }

void blend_rows(const Floats& above, Floats& tile, int64_t extent) {
  const int64_t c = tile.shape[0], h = tile.shape[1], w = tile.shape[2], ah = above.shape[1], aw = above.shape[2];
  extent = std::min({ah, h, extent});
  for (int64_t y = 0; y < extent; ++y) {
    const float keep_above = float(1.0 - double(y) / double(extent)), keep_tile = float(double(y) / double(extent));
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t x = 0; x < w; ++x) {
        float& t = tile.data[size_t((ch * h + y) * w + x)];
        t = above.data[size_t((ch * ah + (ah - extent + y)) * aw + x)] * keep_above + t * keep_tile;
      }
  }
}

void blend_cols(const Floats& left, Floats& tile, int64_t extent) {
  const int64_t c = tile.shape[0], h = tile.shape[1], w = tile.shape[2], lh = left.shape[1], lw = left.shape[2];
  extent = std::min({lw, w, extent});
  for (int64_t x = 0; x < extent; ++x) {
    const float keep_left = float(1.0 - double(x) / double(extent)), keep_tile = float(double(x) / double(extent));
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y) {
        float& t = tile.data[size_t((ch * h + y) * w + x)];
        t = left.data[size_t((ch * lh + y) * lw + (lw - extent + x))] * keep_left + t * keep_tile;
      }
  }
}

Floats decode_tiled(const Floats& latents, const std::function<Floats(const Floats&)>& decode_tile, int64_t tile,
                    int64_t stride, int64_t scale) {
  const int64_t c = latents.shape[1], h = latents.shape[2], w = latents.shape[3];
  const int64_t blend = (tile - stride) * scale, keep = stride * scale, out_h = h * scale, out_w = w * scale;
  Floats out;
  std::vector<Floats> above;
  for (int64_t r = 0, i = 0; i < h; ++r, i += stride) {
    std::vector<Floats> row;
    for (int64_t col = 0, j = 0; j < w; ++col, j += stride) {
      const int64_t th = std::min(tile, h - i), tw = std::min(tile, w - j);
      Floats cut({1, c, th, tw});
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < th; ++y)
          std::copy_n(&latents.data[size_t((ch * h + i + y) * w + j)], tw, &cut.data[size_t((ch * th + y) * tw)]);
      Floats t = decode_tile(cut);
      if (t.shape.size() != 4 || t.shape[0] != 1) refuse("decode: a tile's image is not [1, C, H, W]");
      t.shape.erase(t.shape.begin());
      if (!above.empty()) blend_rows(above[size_t(col)], t, blend);
      if (!row.empty()) blend_cols(row.back(), t, blend);
      const int64_t tc = t.shape[0], tth = t.shape[1], ttw = t.shape[2];
      if (out.shape.empty()) out = Floats({1, tc, out_h, out_w});
      const int64_t y0 = r * keep, x0 = col * keep;
      const int64_t ph = std::min({keep, out_h - y0, tth}), pw = std::min({keep, out_w - x0, ttw});
      for (int64_t ch = 0; ch < tc; ++ch)
        for (int64_t y = 0; y < ph; ++y)
          std::copy_n(&t.data[size_t((ch * tth + y) * ttw)], pw, &out.data[size_t((ch * out_h + y0 + y) * out_w + x0)]);
      row.push_back(std::move(t));
    }
    above = std::move(row);
  }
  return out;
}

}  // namespace ditskip::generate
