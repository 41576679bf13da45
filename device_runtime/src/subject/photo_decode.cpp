// Photo files to 8-bit RGB as Pillow decodes and converts them (photo_decode.h).
#include "subject/photo_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "util/failure.h"

// stb_image's implementation is compiled once, in bundle/photos.cpp (PNG and BMP); here its declarations only.
#define STBI_NO_STDIO
#include <stb/stb_image.h>

#include <jpeglib.h>
#include <jerror.h>

namespace ditskip {

void refuse_unreadable(const std::string& path, const std::string& why) {
  refuse(path + ": cannot be read as an image (" + why + ")");
}

namespace {

// Python's repr() of a str, as Pillow's "cannot identify image file %r" quotes the path.
std::string py_str_repr(const std::string& s) {
  const bool double_quotes = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') out += "\\\\";
    else if (c == quote) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    } else {
      out += c;
    }
  }
  return out + quote;
}

[[noreturn]] void refuse_unidentified(const std::string& path) {
  refuse_unreadable(path, "UnidentifiedImageError: cannot identify image file " + py_str_repr(path));
}

bool starts_with(const std::vector<uint8_t>& file, const char* magic, size_t n, size_t at = 0) {
  return file.size() >= at + n && std::memcmp(file.data() + at, magic, n) == 0;
}

// ---------------------------------------------------------------------------------------------------- libjpeg
// libjpeg reports a fatal error through error_exit, which must not return: it longjmps back to jpeg_run, a function
// with no C++ objects to unwind. A premature end of data is only a warning to libjpeg (it pads with an EOI); Pillow
// refuses such a file as truncated, and so does this.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  bool truncated;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_emit_message(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) err->truncated = true;
}

struct JpegRun {
  int64_t width = 0, height = 0;
  int components = 0;
  J_COLOR_SPACE color_space = JCS_UNKNOWN;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX] = {0};
};

// Reads the header, and with `rgb` (width * height * 3 bytes) decodes to RGB. false on a fatal libjpeg error.
bool jpeg_run(const uint8_t* data, size_t size, uint8_t* rgb, JpegRun* run) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  std::memset(&err, 0, sizeof err);
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_emit_message;
  jpeg_create_decompress(&cinfo);
  if (setjmp(err.jump)) {
    std::memcpy(run->message, err.message, sizeof run->message);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  run->width = cinfo.image_width;
  run->height = cinfo.image_height;
  run->components = cinfo.num_components;
  run->color_space = cinfo.jpeg_color_space;
  if (rgb != nullptr) {
    cinfo.out_color_space = JCS_RGB;                 // grey is replicated, as Pillow's L -> RGB
    jpeg_start_decompress(&cinfo);
    const size_t row_bytes = static_cast<size_t>(cinfo.output_width) * 3;
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW row = rgb + static_cast<size_t>(cinfo.output_scanline) * row_bytes;
      jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
  }
  run->truncated = err.truncated;
  jpeg_destroy_decompress(&cinfo);
  return true;
}

Rgb8Image decode_jpeg(const std::string& path, const std::vector<uint8_t>& file, const PhotoHeader& header) {
  JpegRun run;
  if (!jpeg_run(file.data(), file.size(), nullptr, &run)) refuse_unidentified(path);
  if (run.color_space != JCS_GRAYSCALE && run.color_space != JCS_YCbCr && run.color_space != JCS_RGB)
    refuse_unreadable(path, "a CMYK JPEG: the device reads RGB and greyscale JPEGs");
  Rgb8Image out;
  out.width = header.width;
  out.height = header.height;
  out.rgb.resize(static_cast<size_t>(out.width * out.height * 3));
  if (!jpeg_run(file.data(), file.size(), out.rgb.data(), &run)) refuse_unreadable(path, std::string("OSError: ") + run.message);
  if (run.truncated) refuse_unreadable(path, "OSError: image file is truncated");
  return out;
}

// ---------------------------------------------------------------------------------------------------- stb_image
Rgb8Image decode_stb(const std::string& path, const std::vector<uint8_t>& file, const PhotoHeader& header) {
  const int size = static_cast<int>(file.size());
  int w = 0, h = 0, channels = 0;
  Rgb8Image out;
  if (header.format == PhotoFormat::png && stbi_is_16_bit_from_memory(file.data(), size) &&
      stbi_info_from_memory(file.data(), size, &w, &h, &channels) && channels == 1) {
    // 16-bit grey: Pillow's mode I;16, whose RGB conversion clamps each sample to 255
    stbi_us* grey = stbi_load_16_from_memory(file.data(), size, &w, &h, &channels, 1);
    if (grey == nullptr) refuse_unreadable(path, std::string("OSError: ") + stbi_failure_reason());
    out.rgb.resize(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
    for (size_t i = 0; i < static_cast<size_t>(w) * static_cast<size_t>(h); ++i) {
      const uint8_t v = grey[i] >= 255 ? 255 : static_cast<uint8_t>(grey[i]);
      out.rgb[3 * i] = out.rgb[3 * i + 1] = out.rgb[3 * i + 2] = v;
    }
    stbi_image_free(grey);
  } else {
    stbi_uc* rgb = stbi_load_from_memory(file.data(), size, &w, &h, &channels, 3);
    if (rgb == nullptr) refuse_unreadable(path, std::string("OSError: ") + stbi_failure_reason());
    out.rgb.assign(rgb, rgb + static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
    stbi_image_free(rgb);
  }
  if (w != header.width || h != header.height) refuse_unreadable(path, "OSError: the header's size is not the image's");
  out.width = w;
  out.height = h;
  return out;
}

uint32_t be32(const std::vector<uint8_t>& f, size_t at) {
  return (uint32_t{f[at]} << 24) | (uint32_t{f[at + 1]} << 16) | (uint32_t{f[at + 2]} << 8) | f[at + 3];
}

}  // namespace

PhotoHeader read_photo_header(const std::string& path, const std::vector<uint8_t>& file) {
  PhotoHeader header;
  if (starts_with(file, "\x89PNG\r\n\x1a\n", 8)) {
    // PngImagePlugin reads the size from IHDR (the first chunk); stb_image refuses sides beyond 2^24 in its own
    // header check, so the size comes from the bytes here and the megapixel refusal is photos.py's
    if (file.size() < 33 || !starts_with(file, "IHDR", 4, 12) || be32(file, 8) < 13) refuse_unidentified(path);
    header.format = PhotoFormat::png;
    header.width = be32(file, 16);
    header.height = be32(file, 20);
    if (header.width == 0 || header.height == 0) refuse_unidentified(path);
  } else if (starts_with(file, "\xff\xd8\xff", 3)) {
    JpegRun run;
    if (!jpeg_run(file.data(), file.size(), nullptr, &run)) refuse_unidentified(path);
    header.format = PhotoFormat::jpeg;
    header.width = run.width;
    header.height = run.height;
  } else if (starts_with(file, "BM", 2)) {
    int w = 0, h = 0, channels = 0;
    if (file.size() > static_cast<size_t>(INT32_MAX) ||
        !stbi_info_from_memory(file.data(), static_cast<int>(file.size()), &w, &h, &channels))
      refuse_unidentified(path);
    header.format = PhotoFormat::bmp;
    header.width = w;
    header.height = h;
  } else if (starts_with(file, "RIFF", 4) && starts_with(file, "WEBP", 4, 8)) {
    refuse_unreadable(path, "WebP is not decoded on the device: save the photo as JPEG or PNG");
  } else if (starts_with(file, "GIF8", 4) || starts_with(file, "II*\0", 4) || starts_with(file, "MM\0*", 4)) {
    refuse_unreadable(path, std::string(file[0] == 'G' ? "GIF" : "TIFF") +
                                " is not decoded on the device: save the photo as JPEG or PNG");
  } else {
    refuse_unidentified(path);
  }
  return header;
}

Rgb8Image decode_photo_rgb8(const std::string& path, const std::vector<uint8_t>& file, const PhotoHeader& header) {
  if (file.size() > static_cast<size_t>(INT32_MAX)) refuse_unreadable(path, "OSError: file too large");
  if (header.format == PhotoFormat::jpeg) return decode_jpeg(path, file, header);
  return decode_stb(path, file, header);
}

}  // namespace ditskip
