import Foundation

/// runtime/photos.py `normalise`: the Swift twin of PhotoNormalise.kt (run on the JVM against Pillow, bit for bit, in
/// tests/test_app_subject_stage.py); not compiled here. An 8-bit RGB photo whose short side is above the data
/// resolution is resized (each side round(side * data_px / short), half to even, at least data_px) with a port of
/// Pillow's LANCZOS (libImaging/Resample.c, 8-bit: horizontal pass then vertical pass, filter sinc(x) sinc(x / 3) on
/// [-3, 3) stretched by max(scale, 1), window around (x + 0.5) * scale, weights normalised and turned into fixed point
/// with precisionBits = 22, round half away from zero, clipped to 0...255 after each pass), then scaled to [-1, 1].
/// Core Graphics' / vImage's scalers are not this filter.
enum PhotoNormalise {
    static let precisionBits = 32 - 8 - 2
    private static let lanczosSupport = 3.0

    private static func sinc(_ x: Double) -> Double { x == 0 ? 1 : sin(x * Double.pi) / (x * Double.pi) }
    private static func lanczos(_ x: Double) -> Double { (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0 }

    /// Resample.c precompute_coeffs + normalize_coeffs_8bpc: per output pixel (first input pixel, count) and ksize
    /// fixed-point weights.
    private static func coeffs(inSize: Int, outSize: Int) -> (ksize: Int, bounds: [Int], kk: [Int32]) {
        let scale = Double(inSize) / Double(outSize)
        let filterscale = scale < 1 ? 1 : scale
        let support = lanczosSupport * filterscale
        let ksize = Int(support.rounded(.up)) * 2 + 1
        var pre = [Double](repeating: 0, count: outSize * ksize)
        var bounds = [Int](repeating: 0, count: outSize * 2)
        let ss = 1 / filterscale
        for xx in 0..<outSize {
            let center = (Double(xx) + 0.5) * scale
            var ww = 0.0
            let xmin = max(Int(center - support + 0.5), 0)          // Int(): truncation toward zero, as C's (int)
            let xmax = min(Int(center + support + 0.5), inSize) - xmin
            for x in 0..<max(xmax, 0) {
                let w = lanczos((Double(x + xmin) - center + 0.5) * ss)
                pre[xx * ksize + x] = w
                ww += w
            }
            if ww != 0 { for x in 0..<max(xmax, 0) { pre[xx * ksize + x] /= ww } }
            bounds[2 * xx] = xmin
            bounds[2 * xx + 1] = xmax
        }
        let one = Double(1 << precisionBits)
        let kk = pre.map { Int32($0 < 0 ? (-0.5 + $0 * one).rounded(.towardZero) : (0.5 + $0 * one).rounded(.towardZero)) }
        return (ksize, bounds, kk)
    }

    private static func clip8(_ v: Int32) -> UInt8 { UInt8(max(0, min(255, v >> Int32(precisionBits)))) }

    /// Pillow's im.resize((outW, outH), Image.LANCZOS) of an RGB image: `rgb` [h, w, 3] -> [outH, outW, 3].
    static func resizeLanczos(_ rgb: [UInt8], h: Int, w: Int, outH: Int, outW: Int) -> [UInt8] {
        var img = rgb
        var curW = w
        if outW != w {                                              // horizontal pass
            let c = coeffs(inSize: w, outSize: outW)
            var tmp = [UInt8](repeating: 0, count: h * outW * 3)
            for y in 0..<h { for xx in 0..<outW {
                let xmin = c.bounds[2 * xx], xmax = c.bounds[2 * xx + 1], k = xx * c.ksize
                for ch in 0..<3 {
                    var ss: Int32 = 1 << Int32(precisionBits - 1)
                    for x in 0..<xmax { ss = ss &+ Int32(img[(y * w + x + xmin) * 3 + ch]) &* c.kk[k + x] }
                    tmp[(y * outW + xx) * 3 + ch] = clip8(ss)
                }
            } }
            img = tmp
            curW = outW
        }
        if outH != h {                                              // vertical pass
            let c = coeffs(inSize: h, outSize: outH)
            var tmp = [UInt8](repeating: 0, count: outH * curW * 3)
            for yy in 0..<outH {
                let ymin = c.bounds[2 * yy], ymax = c.bounds[2 * yy + 1], k = yy * c.ksize
                for x in 0..<curW { for ch in 0..<3 {
                    var ss: Int32 = 1 << Int32(precisionBits - 1)
                    for y in 0..<ymax { ss = ss &+ Int32(img[((y + ymin) * curW + x) * 3 + ch]) &* c.kk[k + y] }
                    tmp[(yy * curW + x) * 3 + ch] = clip8(ss)
                } }
            }
            img = tmp
        }
        return img
    }

    /// photos.py normalise's size rule: (h, w) after normalisation to `dataPx`.
    static func normalisedSize(h: Int, w: Int, dataPx: Int) -> (h: Int, w: Int) {
        let short = min(h, w)
        if short <= dataPx { return (h, w) }
        let scale = Double(dataPx) / Double(short)
        return (max(dataPx, Int((Double(h) * scale).rounded(.toNearestOrEven))),
                max(dataPx, Int((Double(w) * scale).rounded(.toNearestOrEven))))
    }

    /// A photo file's name, the SHA-256 of its bytes and its decoded RGB [h, w, 3] -> the subject stage's photo
    /// ([3, h', w'] float32, v / 127.5 - 1).
    static func photo(name: String, sha256: String, rgb: [UInt8], h: Int, w: Int, dataPx: Int) -> SubjectPhoto {
        let size = normalisedSize(h: h, w: w, dataPx: dataPx)
        let px = size.h == h && size.w == w ? rgb : resizeLanczos(rgb, h: h, w: w, outH: size.h, outW: size.w)
        let n = size.h * size.w
        var out = [Float](repeating: 0, count: 3 * n)
        for i in 0..<n { for c in 0..<3 { out[c * n + i] = Float(px[i * 3 + c]) / 127.5 - 1 } }
        return SubjectPhoto(name: name, sha256: sha256, h: size.h, w: size.w, pixels: out)
    }
}
