// patches.py crop_patch and tiling.py run_tiled (encode side), float32 step for step (see patches.h).
#include "subject/patches.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "util/failure.h"

namespace ditskip {
namespace {

struct Taps {
  std::vector<int64_t> lo, hi;
  std::vector<float> w_lo, w_hi;     // (1 - frac), frac
};

Taps taps(double start, double side, int64_t size, int64_t out_px) {
  Taps t;
  for (int64_t i = 0; i < out_px; ++i) {
    const float centre = (float(i) + 0.5f) / float(out_px);
    const float prod = centre * float(side);
    const float src = (float(start) + prod) - 0.5f;
    const float g = (2.0f * src + 1.0f) / float(size) - 1.0f;
    float ix = float(((double(g) + 1.0) * double(size) - 1.0) / 2.0);
    ix = std::fmin(std::fmax(ix, 0.0f), float(size - 1));
    const float lo = std::floor(ix);
    const float frac = ix - lo;
    const int64_t lo_i = int64_t(lo);
    t.lo.push_back(lo_i);
    t.hi.push_back(std::min(lo_i + 1, size - 1));
    t.w_lo.push_back(1.0f - frac);
    t.w_hi.push_back(frac);
  }
  return t;
}

std::vector<int64_t> starts(int64_t size, int64_t stride) {
  std::vector<int64_t> s;
  for (int64_t i = 0; i < size; i += stride) s.push_back(i);
  return s;
}

FloatTensor cut(const FloatTensor& x, int64_t i, int64_t j, int64_t tile) {
  const int64_t C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t th = std::min(tile, H - i), tw = std::min(tile, W - j);
  FloatTensor t{{1, C, th, tw}, std::vector<float>(size_t(C * th * tw))};
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < th; ++y)
      for (int64_t z = 0; z < tw; ++z) t.values[size_t((c * th + y) * tw + z)] = x.values[size_t((c * H + i + y) * W + j + z)];
  return t;
}

// tiling.py blend_rows / blend_cols on [1, C, H, W] tensors
void blend_rows(const FloatTensor& above, FloatTensor& tile, int64_t extent) {
  const int64_t C = tile.shape[1], H = tile.shape[2], W = tile.shape[3], AH = above.shape[2], AW = above.shape[3];
  extent = std::min({AH, H, extent});
  for (int64_t y = 0; y < extent; ++y) {
    const float a = float(1.0 - double(y) / double(extent)), b = float(double(y) / double(extent));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t z = 0; z < W && z < AW; ++z) {
        float& v = tile.values[size_t((c * H + y) * W + z)];
        v = above.values[size_t((c * AH + AH - extent + y) * AW + z)] * a + v * b;
      }
  }
}

void blend_cols(const FloatTensor& left, FloatTensor& tile, int64_t extent) {
  const int64_t C = tile.shape[1], H = tile.shape[2], W = tile.shape[3], LH = left.shape[2], LW = left.shape[3];
  extent = std::min({LW, W, extent});
  for (int64_t x = 0; x < extent; ++x) {
    const float a = float(1.0 - double(x) / double(extent)), b = float(double(x) / double(extent));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H && y < LH; ++y) {
        float& v = tile.values[size_t((c * H + y) * W + x)];
        v = left.values[size_t((c * LH + y) * LW + LW - extent + x)] * a + v * b;
      }
  }
}

}  // namespace

FloatTensor crop_patch(const float* img, int64_t h, int64_t w, const int64_t box[3], int64_t out_px) {
  const Taps ty = taps(double(box[1]), double(box[2]), h, out_px), tx = taps(double(box[0]), double(box[2]), w, out_px);
  FloatTensor out{{1, 3, out_px, out_px}, std::vector<float>(size_t(3 * out_px * out_px))};
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < out_px; ++y) {
      const float s = ty.w_lo[size_t(y)], n = ty.w_hi[size_t(y)];
      const float* rn = img + (c * h + ty.lo[size_t(y)]) * w;
      const float* rs = img + (c * h + ty.hi[size_t(y)]) * w;
      for (int64_t x = 0; x < out_px; ++x) {
        const float e = tx.w_lo[size_t(x)], wt = tx.w_hi[size_t(x)];
        const int64_t xw = tx.lo[size_t(x)], xe = tx.hi[size_t(x)];
        const float nw = s * e, ne = s * wt, sw = n * e, se = n * wt;
        const float v = ((rn[xw] * nw + rn[xe] * ne) + rs[xw] * sw) + rs[xe] * se;
        out.values[size_t((c * out_px + y) * out_px + x)] = v;
      }
    }
  return out;
}

std::string tile_key(int64_t h, int64_t w) { return std::to_string(h) + "x" + std::to_string(w); }

std::vector<std::pair<int64_t, int64_t>> tile_shapes(int64_t h, int64_t w, int64_t tile, int64_t stride) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t i : starts(h, stride))
    for (int64_t j : starts(w, stride)) {
      const std::pair<int64_t, int64_t> s{std::min(tile, h - i), std::min(tile, w - j)};
      if (std::find(shapes.begin(), shapes.end(), s) == shapes.end()) shapes.push_back(s);
    }
  return shapes;
}

FloatTensor encode_tiled(const FloatTensor& x, int64_t tile, int64_t stride, int64_t scale, const RunShape& run_shape) {
  const int64_t h = x.shape[2], w = x.shape[3];
  const int64_t blend = (tile - stride) / scale, keep = stride / scale, out_h = h / scale, out_w = w / scale;
  const std::vector<int64_t> rows = starts(h, stride), cols = starts(w, stride);
  std::map<std::pair<size_t, size_t>, FloatTensor> done;
  for (const auto& shape : tile_shapes(h, w, tile, stride)) {
    std::vector<std::pair<size_t, size_t>> at;
    std::vector<FloatTensor> tiles;
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t c = 0; c < cols.size(); ++c)
        if (std::min(tile, h - rows[r]) == shape.first && std::min(tile, w - cols[c]) == shape.second) {
          at.emplace_back(r, c);
          tiles.push_back(cut(x, rows[r], cols[c], tile));
        }
    std::vector<FloatTensor> results = run_shape(tiles);
    for (size_t k = 0; k < at.size(); ++k) done[at[k]] = std::move(results[k]);
  }
  FloatTensor out;
  std::vector<FloatTensor> above;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<FloatTensor> row;
    for (size_t c = 0; c < cols.size(); ++c) {
      FloatTensor t = std::move(done[{r, c}]);
      if (!above.empty()) blend_rows(above[c], t, blend);
      if (!row.empty()) blend_cols(row.back(), t, blend);
      const int64_t C = t.shape[1], TH = t.shape[2], TW = t.shape[3];
      if (out.shape.empty()) out = FloatTensor{{1, C, out_h, out_w}, std::vector<float>(size_t(C * out_h * out_w))};
      const int64_t y0 = int64_t(r) * keep, z0 = int64_t(c) * keep;
      const int64_t ph = std::min({keep, out_h - y0, TH}), pw = std::min({keep, out_w - z0, TW});
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t y = 0; y < ph; ++y)
          for (int64_t z = 0; z < pw; ++z)
            out.values[size_t((ch * out_h + y0 + y) * out_w + z0 + z)] = t.values[size_t((ch * TH + y) * TW + z)];
      row.push_back(std::move(t));
    }
    above = std::move(row);
  }
  return out;
}

}  // namespace ditskip
