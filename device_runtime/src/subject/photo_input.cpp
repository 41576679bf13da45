// The user's photos (photo_input.h): photos.py photo_files' folder rules with captions=False, then per photo
// load_photos' steps in its order — the size from the header against MAX_PHOTO_PIXELS before decoding, decode to
// RGB (photo_decode), the EXIF turn (photo_exif), normalise's Lanczos resize (photo_lanczos) and float conversion.
#include "subject/photo_input.h"

#include <dirent.h>

#include <algorithm>
#include <cmath>

#include "subject/photo_decode.h"
#include "subject/photo_exif.h"
#include "subject/photo_lanczos.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/sha256.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#endif
#include <stb/stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace ditskip {

namespace {

constexpr int kMaxPhotos = 200;                       // photos.py MAX_PHOTOS
constexpr int64_t kMaxPhotoPixels = 64'000'000;       // photos.py MAX_PHOTO_PIXELS
const char* const kImageSuffixes = ".bmp, .jpeg, .jpg, .png, .webp";   // ', '.join(sorted(IMAGE_SUFFIXES))

// pathlib's suffix (Python 3.11): from the last dot, unless the name starts or ends with it; ASCII-lowercased
// (every suffix compared is ASCII).
std::string lower_suffix(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 >= name.size()) return "";
  std::string s = name.substr(dot);
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

bool image_suffix(const std::string& suffix) {
  return suffix == ".png" || suffix == ".jpg" || suffix == ".jpeg" || suffix == ".webp" || suffix == ".bmp";
}

bool exists(const std::string& path) { return file_size(path) >= 0; }   // stat follows links, as Path.exists

// photo_files(folder, min_photos, captions=False): the photos' names, sorted; refusals as photos.py words them.
std::vector<std::string> photo_names(const std::string& folder_shown, const std::string& folder, int min_photos) {
  if (!exists(folder)) refuse("images folder " + folder_shown + " does not exist");
  if (!is_dir(folder)) refuse("images folder " + folder_shown + " is not a folder");
  std::vector<std::string> names;
  DIR* dir = ::opendir(folder.c_str());
  if (dir == nullptr) io_failure("cannot list images folder " + folder_shown);
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;                 // hidden files (and . / ..)
    if (is_file(join_path(folder, name))) names.push_back(name);  // regular files, links followed
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());        // byte order of UTF-8 = Python's code point order of names
  const int64_t n = static_cast<int64_t>(names.size());
  if (n == 0) refuse("images folder " + folder_shown + " is empty: expected photos (" + kImageSuffixes + ")");
  if (n > kMaxPhotos)
    refuse("images folder " + folder_shown + " has " + std::to_string(n) + " files: at most " +
           std::to_string(kMaxPhotos) + " photos");
  if (n < min_photos)
    refuse("images folder " + folder_shown + " has " + std::to_string(n) + " photo" + (n != 1 ? "s" : "") +
           ": this bundle needs at least " + std::to_string(min_photos));
  for (const std::string& name : names) {
    const std::string suffix = lower_suffix(name);
    if (!image_suffix(suffix))
      refuse(join_path(folder_shown, name) + ": not an image file (expected one of " + kImageSuffixes +
             (suffix == ".txt" ? "; captions beside the photos are read by compile --photo-captions" : "") + ")");
  }
  return names;
}

// photos.py normalise: the short side to data_px when larger — (max(data_px, round(w * scale)), max(data_px,
// round(h * scale))) with scale = data_px / short in double, Python's round (half to even) — then v / 127.5 - 1 in
// float32, channels first.
void normalise(Rgb8Image& image, int64_t data_px, UserPhoto& out) {
  const int64_t short_side = std::min(image.width, image.height);
  if (short_side > data_px) {
    const double scale = static_cast<double>(data_px) / static_cast<double>(short_side);
    const int64_t w = std::max<int64_t>(data_px, static_cast<int64_t>(std::nearbyint(static_cast<double>(image.width) * scale)));
    const int64_t h = std::max<int64_t>(data_px, static_cast<int64_t>(std::nearbyint(static_cast<double>(image.height) * scale)));
    image.rgb = lanczos_resize_rgb8(image.rgb.data(), image.width, image.height, w, h);
    image.width = w;
    image.height = h;
  }
  out.height = image.height;
  out.width = image.width;
  const size_t plane = static_cast<size_t>(image.width * image.height);
  out.chw.resize(3 * plane);
  for (size_t i = 0; i < plane; ++i)
    for (size_t c = 0; c < 3; ++c)
      out.chw[c * plane + i] = static_cast<float>(image.rgb[3 * i + c]) / 127.5f - 1.0f;   // numpy float32
}

void append_bytes(void* context, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(context);
  out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}

}  // namespace

std::vector<UserPhoto> load_user_photos(const std::string& folder, int64_t data_px, int min_photos) {
  const std::string shown = join_path(folder, "");   // str(Path(folder))
  std::vector<UserPhoto> photos;
  for (const std::string& name : photo_names(shown, folder, min_photos)) {
    const std::string path = join_path(shown, name);                 // str(folder / name), as refusals name it
    const std::vector<uint8_t> file = read_bytes(join_path(folder, name));
    const PhotoHeader header = read_photo_header(path, file);
    if (header.width * header.height > kMaxPhotoPixels)
      refuse(path + ": " + std::to_string(header.width) + "x" + std::to_string(header.height) + " px is beyond " +
             std::to_string(kMaxPhotoPixels / 1'000'000) + " megapixels");
    Rgb8Image image = decode_photo_rgb8(path, file, header);
    const int orientation = header.format == PhotoFormat::jpeg ? jpeg_orientation(file.data(), file.size())
                          : header.format == PhotoFormat::png  ? png_orientation(file.data(), file.size())
                                                               : 1;
    apply_orientation(orientation, image.rgb, image.height, image.width);
    UserPhoto photo;
    photo.name = name;
    photo.original_height = image.height;
    photo.original_width = image.width;
    photo.sha256 = sha256_hex(file.data(), file.size());
    normalise(image, data_px, photo);
    photos.push_back(std::move(photo));
  }
  return photos;
}

void save_photo_png(const UserPhoto& photo, const std::string& path) {
  const size_t plane = static_cast<size_t>(photo.height * photo.width);
  if (photo.chw.size() != 3 * plane) refuse(path + ": photo pixels are not [3, H, W]");
  std::vector<uint8_t> rgb(3 * plane);
  for (size_t i = 0; i < plane; ++i) {
    for (size_t c = 0; c < 3; ++c) {
      // photos.py to_uint8 in float32: round((clip(p, -1, 1) + 1) * 127.5), half to even (NaN -> 0)
      const float p = photo.chw[c * plane + i];
      const float clipped = p < -1.0f ? -1.0f : (p > 1.0f ? 1.0f : p);
      const float v = std::nearbyint((clipped + 1.0f) * 127.5f);
      rgb[3 * i + c] = v >= 0.0f && v <= 255.0f ? static_cast<uint8_t>(v) : 0;
    }
  }
  std::vector<uint8_t> png;
  if (!stbi_write_png_to_func(append_bytes, &png, static_cast<int>(photo.width), static_cast<int>(photo.height), 3,
                              rgb.data(), static_cast<int>(photo.width * 3)))
    io_failure("cannot encode " + path + " as PNG");
  atomic_write(path, png.data(), png.size());
}

}  // namespace ditskip
