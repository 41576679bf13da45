// A bundle's photo as the preprocess program takes it (executorch.py Preprocessor.photo_pixels): Pillow's
// convert("RGB") of the PNG, then float32(v) / 127.5f - 1.0f, channels first.
#include "bundle/photos.h"

#include "util/failure.h"
#include "util/files.h"

#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP   // subject/photo_decode.cpp reads the user's BMP photos through this one implementation
#define STBI_NO_STDIO
#define STBI_FAILURE_USERMSG
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace ditskip {

PhotoPixels read_photo_pixels(const std::string& png_path) {
  const std::vector<uint8_t> file = read_bytes(png_path);
  if (file.size() > static_cast<size_t>(INT32_MAX)) refuse(png_path + ": not a readable PNG (too large)");
  int w = 0, h = 0, channels = 0;
  // 3 channels asked: grey is replicated, alpha dropped (Pillow's convert("RGB")); 16-bit samples keep the high byte
  stbi_uc* rgb = stbi_load_from_memory(file.data(), static_cast<int>(file.size()), &w, &h, &channels, 3);
  if (rgb == nullptr) refuse(png_path + ": not a readable PNG (" + stbi_failure_reason() + ")");
  PhotoPixels out;
  out.height = h;
  out.width = w;
  const size_t plane = static_cast<size_t>(w) * static_cast<size_t>(h);
  out.chw.resize(3 * plane);
  for (size_t i = 0; i < plane; ++i)
    for (size_t c = 0; c < 3; ++c)
      out.chw[c * plane + i] = static_cast<float>(rgb[3 * i + c]) / 127.5f - 1.0f;   // numpy: float32 arithmetic
  stbi_image_free(rgb);
  return out;
}

}  // namespace ditskip
