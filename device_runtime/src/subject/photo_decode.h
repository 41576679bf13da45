// A photo file's pixels as Pillow's Image.open(...).convert("RGB") gives them, for the formats the device reads:
//   PNG and BMP through stb_image (the one implementation in bundle/photos.cpp): 8-bit grey / grey+alpha / RGB /
//     RGBA / palette as Pillow converts them (grey replicated, alpha dropped, palette looked up); 16-bit samples keep
//     their high byte, except 16-bit grey (Pillow's mode I;16), which Pillow clamps to 255 — so does this;
//   JPEG through libjpeg-turbo (Debian's libjpeg62-turbo, what Pillow's wheel also bundles): the default islow IDCT
//     and fancy upsampling, decoded straight to RGB; equal to Pillow's pixels (the tests compare them).
// Refused, one line "<path>: cannot be read as an image (...)": content no reader identifies (Pillow's
// "UnidentifiedImageError: cannot identify image file '<path>'" word for word), a truncated or damaged file,
// CMYK / YCCK JPEGs, and WebP, GIF and TIFF content, which Pillow would read but the device does not (WebP: Android
// and iOS decode it natively, so an app hands the core JPEG or PNG; a phone build carries no libwebp).
// RLE-compressed BMPs (stb_image does not read them) are refused as not identified.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ditskip {

enum class PhotoFormat { png, jpeg, bmp };

struct PhotoHeader {
  PhotoFormat format = PhotoFormat::png;
  int64_t width = 0, height = 0;     // as stored (before any EXIF turn): what Pillow's im.size reports on open
};

struct Rgb8Image {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;           // [height, width, 3]
};

// Identifies the file and reads its size from the header alone (Image.open). `path` names it in refusals.
PhotoHeader read_photo_header(const std::string& path, const std::vector<uint8_t>& file);
// Decodes the whole file to 8-bit RGB (im.convert("RGB")).
Rgb8Image decode_photo_rgb8(const std::string& path, const std::vector<uint8_t>& file, const PhotoHeader& header);

// "<path>: cannot be read as an image (<why>)" as photos.py words it.
[[noreturn]] void refuse_unreadable(const std::string& path, const std::string& why);

}  // namespace ditskip
