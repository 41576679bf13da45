// The user's photos as the subject stage reads them (ditskip_edge/runtime/photos.py load_photos): the folder's rules
// (sorted by name, hidden files skipped, image suffixes only, MAX_PHOTOS, min_photos), each file decoded, turned
// upright by its EXIF orientation (PIL.ImageOps.exif_transpose), converted to RGB, its short side resized to data_px
// with Pillow's Lanczos filter when larger (bit for bit Pillow's uint8 result), then [3, H, W] float32 v / 127.5 - 1.
// Refusals are photos.py's one-line messages. Formats: PNG, JPEG, BMP; a WebP (which Pillow reads) is refused with
// one line asking for JPEG or PNG (photo_decode.h says why and what else differs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ditskip {

struct UserPhoto {
  std::string name;                 // file name in the folder
  int64_t height = 0, width = 0;    // after normalisation
  int64_t original_height = 0, original_width = 0;   // the file's size, upright, before normalisation
  std::vector<float> chw;           // [3, H, W] in [-1, 1]
  std::string sha256;               // of the file's bytes (the run identity)
};

std::vector<UserPhoto> load_user_photos(const std::string& folder, int64_t data_px, int min_photos);

// photos.py save_png of normalised pixels: round((clip(p, -1, 1) + 1) * 127.5) as 8-bit RGB; written atomically.
void save_photo_png(const UserPhoto& photo, const std::string& path);

}  // namespace ditskip
