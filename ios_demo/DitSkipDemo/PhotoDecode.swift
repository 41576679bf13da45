import CoreGraphics
import CryptoKit
import Foundation
import ImageIO
import UIKit

/// The picked photos -> the subject stage's photos, on the phone (runtime/photos.py `load_photos` + schedule.py
/// `check_photo_sizes`): each photo's bytes (the SHA-256 the run identity holds is of those bytes) decoded by UIKit,
/// drawn upright (its EXIF / UIImage orientation applied) into an 8-bit RGBX bitmap in the photo's own RGB colour
/// space where Core Graphics can draw into it (Pillow applies no colour profile; sRGB otherwise), checked for size,
/// normalised by PhotoNormalise to the model bundle's data resolution (s_max_px). The twin of PhotoDecode.kt; not
/// compiled here (no Swift compiler). Differences from Pillow (not checked: no iPhone here): Apple's decoders give
/// their own pixels for JPEG / HEIC, Pillow applies no EXIF orientation, transparent pixels are drawn over black.
enum PhotoDecode {
    static let maxPhotoPixels = 64_000_000            // photos.py MAX_PHOTO_PIXELS
    static let maxAspect = 4.0                        // schedule.py MAX_ASPECT
    static let minShortSideFraction = 0.5             // schedule.py MIN_SHORT_SIDE_FRACTION

    /// A photo's bytes -> its RGB [h, w, 3] (upright) and size.
    static func decode(_ data: Data, name: String) throws -> (rgb: [UInt8], h: Int, w: Int) {
        guard let image = UIImage(data: data), let cg = image.cgImage
        else { throw TrainError.bundle("\(name): cannot be read as an image") }
        guard cg.width * cg.height <= maxPhotoPixels
        else { throw TrainError.bundle("\(name): \(cg.width)x\(cg.height) px is beyond \(maxPhotoPixels / 1_000_000) megapixels") }
        let swapped: Bool
        switch image.imageOrientation {
        case .left, .leftMirrored, .right, .rightMirrored: swapped = true
        default: swapped = false
        }
        let w = swapped ? cg.height : cg.width, h = swapped ? cg.width : cg.height
        let srgb = CGColorSpace(name: CGColorSpace.sRGB)!
        let own = cg.colorSpace?.model == .rgb ? cg.colorSpace : nil
        let info = CGImageAlphaInfo.noneSkipLast.rawValue                  // R, G, B, X bytes
        guard let ctx = CGContext(data: nil, width: w, height: h, bitsPerComponent: 8, bytesPerRow: 4 * w,
                                  space: own ?? srgb, bitmapInfo: info)
                ?? CGContext(data: nil, width: w, height: h, bitsPerComponent: 8, bytesPerRow: 4 * w, space: srgb, bitmapInfo: info)
        else { throw TrainError.runtime("\(name): no \(w)x\(h) bitmap context") }
        ctx.interpolationQuality = .none                                    // a rotation / flip only: no resampling
        ctx.translateBy(x: 0, y: CGFloat(h))                                // UIKit's top-left origin
        ctx.scaleBy(x: 1, y: -1)
        UIGraphicsPushContext(ctx)
        UIImage(cgImage: cg, scale: 1, orientation: image.imageOrientation).draw(in: CGRect(x: 0, y: 0, width: w, height: h))
        UIGraphicsPopContext()
        guard let base = ctx.data else { throw TrainError.runtime("\(name): bitmap context has no memory") }
        let row = ctx.bytesPerRow
        let px = base.bindMemory(to: UInt8.self, capacity: row * h)
        var rgb = [UInt8](repeating: 0, count: 3 * w * h)
        for y in 0..<h { for x in 0..<w {
            let o = y * row + 4 * x, p = (y * w + x) * 3
            rgb[p] = px[o]; rgb[p + 1] = px[o + 1]; rgb[p + 2] = px[o + 2]
        } }
        return (rgb, h, w)
    }

    /// schedule.py check_photo_sizes (on the photo's size before normalisation).
    static func checkSize(_ cfg: ScheduleConfig, name: String, h: Int, w: Int) throws {
        let minShort = max(cfg.multiplePx, Int((minShortSideFraction * Double(cfg.sMinPx)).rounded(.up)))
        let short = min(h, w), long = max(h, w)
        guard short >= minShort
        else { throw TrainError.bundle("photo \(name) is \(w)x\(h) px: its short side must be at least \(minShort) px (half the train resolution \(cfg.sMinPx) px)") }
        guard Double(long) <= maxAspect * Double(short)
        else { throw TrainError.bundle("photo \(name) is \(w)x\(h) px: aspect ratio \(String(format: "%.1f", Double(long) / Double(short))):1 is beyond 4:1; crop it first") }
    }

    /// The photos (bytes and a file extension each) as the subject stage takes them. The picker gives no file names:
    /// each is named `photo-<first 12 hex digits of its SHA-256>.<ext>`, so the order (by name, as photos.py sorts a
    /// folder) and the run identity do not depend on the picking order.
    static func load(_ files: [(data: Data, ext: String)], cfg: ScheduleConfig,
                     progress: (Int, Int) -> Void) throws -> [SubjectPhoto] {
        var out: [SubjectPhoto] = []
        for (i, f) in files.enumerated() {
            let sha = CacheWriter.hex(SHA256.hash(data: f.data))
            let name = "photo-\(sha.prefix(12)).\(f.ext)"
            let d = try decode(f.data, name: name)
            try checkSize(cfg, name: name, h: d.h, w: d.w)
            out.append(PhotoNormalise.photo(name: name, sha256: sha, rgb: d.rgb, h: d.h, w: d.w, dataPx: cfg.sMaxPx))
            progress(i + 1, files.count)
        }
        return out.sorted { ($0.name, $0.sha256) < ($1.name, $1.sha256) }
    }
}

/// subject/photos/NNN.png through ImageIO (CGImageDestination, opaque 8-bit sRGB, lossless).
struct CGPngWriter: PngWriter {
    func write(_ rgb: [UInt8], h: Int, w: Int, to url: URL) throws {
        var rgba = [UInt8](repeating: 255, count: 4 * h * w)
        for p in 0..<(h * w) { rgba[4 * p] = rgb[3 * p]; rgba[4 * p + 1] = rgb[3 * p + 1]; rgba[4 * p + 2] = rgb[3 * p + 2] }
        guard let provider = CGDataProvider(data: Data(rgba) as CFData),
              let image = CGImage(width: w, height: h, bitsPerComponent: 8, bitsPerPixel: 32, bytesPerRow: 4 * w,
                                  space: CGColorSpace(name: CGColorSpace.sRGB)!,
                                  bitmapInfo: CGBitmapInfo(rawValue: CGImageAlphaInfo.noneSkipLast.rawValue),
                                  provider: provider, decode: nil, shouldInterpolate: false, intent: .defaultIntent),
              let dest = CGImageDestinationCreateWithURL(url as CFURL, "public.png" as CFString, 1, nil)
        else { throw TrainError.runtime("\(url.path): PNG encoding failed") }
        CGImageDestinationAddImage(dest, image, nil)
        guard CGImageDestinationFinalize(dest) else { throw TrainError.runtime("\(url.path): PNG encoding failed") }
    }
}
