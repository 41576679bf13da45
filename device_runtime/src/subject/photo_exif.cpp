// EXIF / XMP orientation as Pillow reads it, and exif_transpose's eight turns (photo_exif.h).
#include "subject/photo_exif.h"

#include <cstring>
#include <string>

namespace ditskip {

namespace {

// Image.Exif.load -> TiffImagePlugin.ImageFileDirectory_v2: "Exif\0\0" prefixes dropped, an 8-byte TIFF header
// (II*\0 or MM\0*), IFD0 at its offset, 12-byte entries (tag, type, count, value or offset). The last Orientation
// entry wins; Pillow keeps the first value of an integer type (BYTE and UNDEFINED come back as bytes: no turn); a
// value beyond the block is skipped. kAbsent when the block has no Orientation; a value no turn matches as -1.
constexpr int kAbsent = -100;

int exif_block_orientation(std::string data) {
  while (data.compare(0, 6, std::string("Exif\0\0", 6)) == 0) data.erase(0, 6);
  if (data.size() < 8) return kAbsent;
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  const size_t n = data.size();
  bool little;
  if (std::memcmp(p, "II*\0", 4) == 0) little = true;
  else if (std::memcmp(p, "MM\0*", 4) == 0) little = false;
  else return kAbsent;
  const auto u16 = [&](size_t at) -> uint32_t {
    return little ? p[at] | (p[at + 1] << 8) : (p[at] << 8) | p[at + 1];
  };
  const auto u32 = [&](size_t at) -> uint32_t {
    return little ? p[at] | (p[at + 1] << 8) | (p[at + 2] << 16) | (uint32_t{p[at + 3]} << 24)
                  : (uint32_t{p[at]} << 24) | (p[at + 1] << 16) | (p[at + 2] << 8) | p[at + 3];
  };
  const size_t ifd = u32(4);
  if (ifd + 2 > n) return kAbsent;
  const size_t entries = u16(ifd);
  int orientation = kAbsent;
  for (size_t e = 0; e < entries; ++e) {
    const size_t at = ifd + 2 + 12 * e;
    if (at + 12 > n) break;                       // a truncated directory: the entries read so far count
    if (u16(at) != 0x0112) continue;
    const uint32_t type = u16(at + 2), count = u32(at + 4);
    size_t unit;
    switch (type) {
      case 3: case 8: unit = 2; break;            // SHORT, SIGNED SHORT
      case 4: case 9: unit = 4; break;            // LONG, SIGNED LONG
      case 6: unit = 1; break;                    // SIGNED BYTE
      case 1: case 7: orientation = -1; continue; // BYTE / UNDEFINED: bytes, matches no turn
      default: continue;                          // other types: no integer value
    }
    if (count == 0) continue;
    size_t value_at = at + 8;
    if (static_cast<uint64_t>(unit) * count > 4) {
      value_at = u32(at + 8);
      if (value_at + static_cast<uint64_t>(unit) * count > n) continue;   // Pillow: corrupt, tag skipped
    }
    int64_t v;
    if (unit == 2) v = type == 8 ? int64_t{static_cast<int16_t>(u16(value_at))} : int64_t{u16(value_at)};
    else if (unit == 4) v = type == 9 ? int64_t{static_cast<int32_t>(u32(value_at))} : int64_t{u32(value_at)};
    else v = static_cast<int8_t>(p[value_at]);
    orientation = v >= 0 && v <= 9 ? static_cast<int>(v) : -1;
  }
  return orientation;
}

// re.search(rb'tiff:Orientation(="|>)([0-9])', xmp): the digit, or kAbsent without a match.
int xmp_orientation(const std::string& xmp) {
  const std::string key = "tiff:Orientation";
  for (size_t at = xmp.find(key); at != std::string::npos; at = xmp.find(key, at + 1)) {
    size_t v = at + key.size();
    if (v < xmp.size() && xmp[v] == '>') v += 1;
    else if (v + 1 < xmp.size() && xmp[v] == '=' && xmp[v + 1] == '"') v += 2;
    else continue;
    if (v < xmp.size() && xmp[v] >= '0' && xmp[v] <= '9') return xmp[v] - '0';
  }
  return kAbsent;
}

int orientation_of(bool have_exif, const std::string& exif, bool have_xmp, const std::string& xmp) {
  int o = have_exif ? exif_block_orientation(exif) : kAbsent;
  if (o == kAbsent && have_xmp) o = xmp_orientation(xmp);   // Image.getexif: XMP only when EXIF has no Orientation
  return o == kAbsent ? 1 : o;
}

}  // namespace

// JpegImagePlugin: markers from SOI up to SOS; APP1 "Exif\0\0" segments (the first, later ones' bodies appended),
// the last APP1 XMP segment (after its namespace's NUL).
int jpeg_orientation(const uint8_t* file, size_t size) {
  std::string exif, xmp;
  bool have_exif = false, have_xmp = false;
  size_t at = 2;
  while (at + 4 <= size) {
    if (file[at] != 0xFF) { ++at; continue; }        // Pillow skips pad bytes between markers
    const uint8_t marker = file[at + 1];
    if (marker == 0xFF) { ++at; continue; }
    if (marker == 0xDA || marker == 0xD9) break;       // SOS / EOI: no more headers
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) { at += 2; continue; }   // no length
    const size_t length = (size_t{file[at + 2]} << 8) | file[at + 3];
    if (length < 2 || at + 2 + length > size) break;
    const char* body = reinterpret_cast<const char*>(file + at + 4);
    const size_t body_size = length - 2;
    if (marker == 0xE1) {
      const std::string s(body, body_size);
      static const std::string kExif("Exif\0\0", 6), kXmp("http://ns.adobe.com/xap/1.0/\0", 29);
      if (s.compare(0, 6, kExif) == 0) {
        if (have_exif) exif += s.substr(6);
        else exif = s, have_exif = true;
      } else if (s.compare(0, kXmp.size(), kXmp) == 0) {
        xmp = s.substr(kXmp.size()), have_xmp = true;
      }
    }
    at += 2 + length;
  }
  return orientation_of(have_exif, exif, have_xmp, xmp);
}

// PngImagePlugin: every chunk (those after IDAT are read at load()): the last eXIf, the last uncompressed
// "XML:com.adobe.xmp" text (tEXt, or iTXt with compression flag 0).
int png_orientation(const uint8_t* file, size_t size) {
  std::string exif, xmp;
  bool have_exif = false, have_xmp = false;
  size_t at = 8;
  const std::string kXmpKey("XML:com.adobe.xmp\0", 18);
  while (at + 12 <= size) {
    const size_t length = (size_t{file[at]} << 24) | (size_t{file[at + 1]} << 16) | (size_t{file[at + 2]} << 8) |
                          file[at + 3];
    if (at + 12 + length > size) break;
    const std::string type(reinterpret_cast<const char*>(file + at + 4), 4);
    const std::string body(reinterpret_cast<const char*>(file + at + 8), length);
    if (type == "eXIf") {
      exif = body, have_exif = true;
    } else if (type == "tEXt" && body.compare(0, kXmpKey.size(), kXmpKey) == 0) {
      xmp = body.substr(kXmpKey.size()), have_xmp = true;
    } else if (type == "iTXt" && body.compare(0, kXmpKey.size(), kXmpKey) == 0) {
      const size_t flags = kXmpKey.size();            // compression flag, method, language\0, translated\0, text
      if (body.size() >= flags + 2 && body[flags] == 0) {
        const size_t lang_end = body.find('\0', flags + 2);
        const size_t tk_end = lang_end == std::string::npos ? lang_end : body.find('\0', lang_end + 1);
        if (tk_end != std::string::npos) xmp = body.substr(tk_end + 1), have_xmp = true;
      }
    } else if (type == "IEND") {
      break;
    }
    at += 12 + length;
  }
  return orientation_of(have_exif, exif, have_xmp, xmp);
}

void apply_orientation(int orientation, std::vector<uint8_t>& rgb, int64_t& h, int64_t& w) {
  if (orientation < 2 || orientation > 8) return;
  const bool swap = orientation >= 5;
  const int64_t oh = swap ? w : h, ow = swap ? h : w;
  std::vector<uint8_t> out(rgb.size());
  for (int64_t y = 0; y < oh; ++y) {
    for (int64_t x = 0; x < ow; ++x) {
      int64_t sy = 0, sx = 0;                         // the source pixel of output (y, x)
      switch (orientation) {
        case 2: sy = y, sx = w - 1 - x; break;        // FLIP_LEFT_RIGHT
        case 3: sy = h - 1 - y, sx = w - 1 - x; break;   // ROTATE_180
        case 4: sy = h - 1 - y, sx = x; break;        // FLIP_TOP_BOTTOM
        case 5: sy = x, sx = y; break;                // TRANSPOSE
        case 6: sy = h - 1 - x, sx = y; break;        // ROTATE_270 (90 clockwise)
        case 7: sy = h - 1 - x, sx = w - 1 - y; break;   // TRANSVERSE
        case 8: sy = x, sx = w - 1 - y; break;        // ROTATE_90 (counter-clockwise)
      }
      std::memcpy(&out[static_cast<size_t>((y * ow + x) * 3)], &rgb[static_cast<size_t>((sy * w + sx) * 3)], 3);
    }
  }
  rgb.swap(out);
  h = oh;
  w = ow;
}

}  // namespace ditskip
