// A bundle's normalised photo (subject/photos/NNN.png) as the preprocess program takes it: [1, 3, H, W] float32,
// value / 127.5 - 1 in float32 (ditskip_edge/runtime/executorch.py Preprocessor.photo_pixels; Pillow's RGB
// conversion of an RGB / RGBA / grey PNG). Decoded with stb_image (header-only, Debian libstb-dev).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ditskip {

struct PhotoPixels {
  int64_t height = 0, width = 0;
  std::vector<float> chw;              // [3, H, W] (the batch of 1 is implied)
};

PhotoPixels read_photo_pixels(const std::string& png_path);   // refuses an unreadable file naming it

}  // namespace ditskip
