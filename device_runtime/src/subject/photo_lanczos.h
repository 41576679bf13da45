// Pillow's Image.resize(size, Image.LANCZOS) of an 8-bit RGB image, bit for bit (Pillow's libImaging/Resample.c, the
// path photos.py normalise takes): per axis a Lanczos-3 window widened by the reduction factor, weights normalised
// to sum 1 in double, then fixed point with 22 fractional bits; two passes, each rounding and clamping to 0..255 —
// horizontal then vertical, or vertical first when the height shrinks by more than twice as many pixels as the width
// (Pillow 13's order: the 8-bit result between the passes makes the order visible).
#pragma once

#include <cstdint>
#include <vector>

namespace ditskip {

// rgb: [in_h, in_w, 3] -> [out_h, out_w, 3]. An axis whose size does not change is not filtered (as Pillow).
std::vector<uint8_t> lanczos_resize_rgb8(const uint8_t* rgb, int64_t in_w, int64_t in_h, int64_t out_w,
                                         int64_t out_h);

}  // namespace ditskip
