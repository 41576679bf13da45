import Foundation

/// A sample's crop of a photo resized to s_min, on the phone: the Swift twin of Patches.kt and
/// ditskip_edge/runtime/patches.py (grid_sample: bilinear, border padding, align_corners=False pixel centres), float32
/// steps as there. Patches.kt runs on the JVM against patches.py (tests/test_bundle_contract.py); this mirrors it line
/// for line and is not compiled here.
enum Patches {
    private struct Taps { var lo: [Int]; var hi: [Int]; var wLo: [Float]; var wHi: [Float] }

    private static func taps(start: Float, side: Float, size: Int, out: Int) -> Taps {
        var t = Taps(lo: [Int](repeating: 0, count: out), hi: [Int](repeating: 0, count: out),
                     wLo: [Float](repeating: 0, count: out), wHi: [Float](repeating: 0, count: out))
        for i in 0..<out {
            let centre = (Float(i) + 0.5) / Float(out)
            let src = start + centre * side - 0.5
            let g = (2 * src + 1) / Float(size) - 1
            var ix = Float(((Double(g) + 1.0) * Double(size) - 1.0) / 2.0)
            ix = min(max(ix, 0), Float(size - 1))
            let f = ix.rounded(.down)
            let frac = ix - f
            t.lo[i] = Int(f); t.hi[i] = min(t.lo[i] + 1, size - 1)
            t.wHi[i] = frac; t.wLo[i] = 1 - frac
        }
        return t
    }

    /// photo [3, h, w] (row-major, [-1, 1]), crop box (x0, y0, side) -> patch [1, 3, out, out].
    static func crop(_ photo: [Float], h: Int, w: Int, x0: Int, y0: Int, side: Int, out: Int) -> [Float] {
        let ty = taps(start: Float(y0), side: Float(side), size: h, out: out)
        let tx = taps(start: Float(x0), side: Float(side), size: w, out: out)
        var res = [Float](repeating: 0, count: 3 * out * out)
        for c in 0..<3 {
            let base = c * h * w
            for i in 0..<out {
                let rn = base + ty.lo[i] * w, rs = base + ty.hi[i] * w
                let s = ty.wLo[i], n = ty.wHi[i]
                for j in 0..<out {
                    let e = tx.wLo[j], wt = tx.wHi[j]
                    let nw = s * e, ne = s * wt, sw = n * e, se = n * wt
                    let a = photo[rn + tx.lo[j]] * nw + photo[rn + tx.hi[j]] * ne
                    res[(c * out + i) * out + j] = a + photo[rs + tx.lo[j]] * sw + photo[rs + tx.hi[j]] * se
                }
            }
        }
        return res
    }
}
