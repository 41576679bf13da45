// generation.py's last lines (see picture.h).
#include "generate/picture.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#define STB_IMAGE_WRITE_STATIC            // its own copy: another part of the core may carry stb_image_write too
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>

#include "util/failure.h"
#include "util/files.h"

namespace ditskip::generate {

Floats to_pixels(const Floats& image) {
  const int64_t c = image.shape.at(1), h = image.shape.at(2), w = image.shape.at(3);
  Floats px({h, w, c});
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const float v = image.data[size_t((ch * h + y) * w + x)] * 0.5f + 0.5f;
        px.data[size_t((y * w + x) * c + ch)] = std::min(std::max(v, 0.0f), 1.0f);
      }
  return px;
}

std::vector<uint8_t> to_uint8(const Floats& pixels) {
  std::vector<uint8_t> out(pixels.data.size());
  for (size_t k = 0; k < out.size(); ++k) out[k] = uint8_t(std::nearbyint(pixels.data[k] * 255.0f));
  return out;
}

namespace {
void write_to_vector(void* context, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(context);
  out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}
}  // namespace

std::string write_png(const std::string& out, const Floats& pixels) {
  const std::string path = join_path(out, "");
  const int h = int(pixels.shape.at(0)), w = int(pixels.shape.at(1)), c = int(pixels.shape.at(2));
  const std::vector<uint8_t> u8 = to_uint8(pixels);
  std::vector<uint8_t> png;
  if (stbi_write_png_to_func(write_to_vector, &png, w, h, c, u8.data(), w * c) == 0)
    runtime_failure(path + ": could not encode the PNG");
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (!dir.empty()) make_dirs(dir);
  const std::string tmp = join_path(dir.empty() ? "." : dir, "." + name + ".tmp");
  atomic_write(tmp, png.data(), png.size());            // tmp.tmp -> tmp, then tmp -> path
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    io_failure("cannot rename " + tmp + " to " + path);
  }
  return path;
}

void write_raw(const std::string& path, const Floats& pixels) {
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_dirs(path.substr(0, slash));
  atomic_write(path, pixels.data.data(), pixels.data.size() * sizeof(float));
}

}  // namespace ditskip::generate
