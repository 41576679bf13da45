import CoreGraphics
import Foundation
import ImageIO
import UniformTypeIdentifiers

/// A picked photo's bytes -> an upright PNG file, what the subject stage takes (`--photos DIR`). The platform part of
/// photo handling: ImageIO decodes the photo with its EXIF orientation applied (Pillow on the host applies none), at
/// full size, and writes it losslessly. Size checks, normalisation and everything after are the subject stage's.
/// Not compiled here (no Swift toolchain).
enum PhotoDecode {
    static let maxPhotoPixels = 64_000_000            // runtime/photos.py MAX_PHOTO_PIXELS: refused before decoding

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static func writeUpright(_ data: Data, to url: URL) throws {
        let name = url.lastPathComponent
        guard let source = CGImageSourceCreateWithData(data as CFData, nil),
              let props = CGImageSourceCopyPropertiesAtIndex(source, 0, nil) as? [CFString: Any],
              let w = props[kCGImagePropertyPixelWidth] as? Int, let h = props[kCGImagePropertyPixelHeight] as? Int
        else { throw Failure("\(name): cannot be read as an image") }
        guard w * h <= maxPhotoPixels
        else { throw Failure("\(name): \(w)x\(h) px is beyond \(maxPhotoPixels / 1_000_000) megapixels") }
        let options: [CFString: Any] = [kCGImageSourceCreateThumbnailFromImageAlways: true,
                                        kCGImageSourceCreateThumbnailWithTransform: true,   // EXIF orientation
                                        kCGImageSourceThumbnailMaxPixelSize: max(w, h)]     // full size
        guard let image = CGImageSourceCreateThumbnailAtIndex(source, 0, options as CFDictionary)
        else { throw Failure("\(name): cannot be decoded") }
        guard let dest = CGImageDestinationCreateWithURL(url as CFURL, UTType.png.identifier as CFString, 1, nil)
        else { throw Failure("\(url.path): cannot be written") }
        CGImageDestinationAddImage(dest, image, nil)
        guard CGImageDestinationFinalize(dest) else { throw Failure("\(url.path): PNG encoding failed") }
    }
}
