// A photo's orientation as PIL.ImageOps.exif_transpose reads it (Image.getexif): the Orientation tag (0x0112) of
// IFD0 of the EXIF block — a JPEG's first APP1 "Exif\0\0" segment, a PNG's eXIf chunk — parsed here by hand, either
// byte order; without that tag, the first tiff:Orientation="N" / tiff:Orientation>N of the XMP packet (a JPEG's APP1
// XMP segment, a PNG's iTXt "XML:com.adobe.xmp"). Then the pixels turned upright as exif_transpose turns them:
// 2 mirror left-right, 3 rotate 180, 4 mirror top-bottom, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate
// 90 counter-clockwise; any other value (1, absent, 0, 9, a byte string) leaves the photo as it is.
// Not read (Pillow does): a PNG's "Raw profile type exif" text chunk (ImageMagick), compressed XMP; an EXIF block
// Pillow refuses as "not a TIFF file" is taken here as no orientation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ditskip {

int jpeg_orientation(const uint8_t* file, size_t size);     // 1 when absent
int png_orientation(const uint8_t* file, size_t size);

// rgb [h, w, 3] turned upright in place; h and w become the upright size (swapped by 5..8).
void apply_orientation(int orientation, std::vector<uint8_t>& rgb, int64_t& h, int64_t& w);

}  // namespace ditskip
