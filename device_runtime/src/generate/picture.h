// The generated picture (generation.py sample / to_uint8 / write_png): decoded image [1, 3, H, W] ->
// clip(image * 0.5 + 0.5, 0, 1) as [H, W, 3] float32 -> uint8 round(x * 255) (numpy: half to even) -> PNG (stb_image_
// write; the pixels are Pillow's, the compressed bytes are not), written to .<name>.tmp beside it and renamed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generate/floats.h"

namespace ditskip::generate {

Floats to_pixels(const Floats& image);                         // [1, 3, H, W] -> [H, W, 3] in [0, 1]
std::vector<uint8_t> to_uint8(const Floats& pixels);
// Writes the PNG whole or not at all (parent folders made); returns the path written.
std::string write_png(const std::string& out, const Floats& pixels);
// The raw float32 [H, W, 3] little-endian bytes (DITSKIP_DUMP_IMAGE: the tests compare runtimes on the float image).
void write_raw(const std::string& path, const Floats& pixels);

}  // namespace ditskip::generate
