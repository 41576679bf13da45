import Foundation

/// The trained LoRA merged into a frozen linear at the weights' own bit width, the Swift twin of
/// ditskip_edge/runtime/weights.py (layouts of ditskip_edge/quantize.py): fp32 `weight` [O, I]; int8 `w_codes` +
/// `w_scale` [O, 1]; int4 `w_packed` [O, I/2] (low nibble = even column, codes + 8) + `w_scale` [O, I/g, 1].
/// W' = dequantize(W) + scale * B A, requantized: s = max|w| / ((qmax - qmin) / 2) (>= 1e-12),
/// code = clamp(rint(w * (1 / s)), qmin, qmax), in float32.
enum LoraMerge {
    static func quantize(_ w: [Float], rows: Int, groupLen: Int, bits: Int) -> (codes: [Int8], scales: [Float]) {
        let qmax = bits == 8 ? 127 : 7, qmin = -qmax - 1
        var codes = [Int8](repeating: 0, count: w.count), scales = [Float](repeating: 0, count: rows)
        for r in 0..<rows {
            var m: Float = 0
            for j in 0..<groupLen { m = max(m, abs(w[r * groupLen + j])) }
            let s = max(m / (Float(qmax - qmin) / 2), 1e-12)
            scales[r] = s
            let inv = 1 / s
            for j in 0..<groupLen {
                let q = (w[r * groupLen + j] * inv).rounded(.toNearestOrEven)
                codes[r * groupLen + j] = Int8(min(max(q, Float(qmin)), Float(qmax)))
            }
        }
        return (codes, scales)
    }

    static func dequantize(_ states: [String: RawTensor]) throws -> (w: [Float], o: Int, i: Int) {
        if let wt = states["weight"] { return (try wt.floats(), wt.shape[0], wt.shape[1]) }
        let scale = try states["w_scale"]!.floats()
        if let ct = states["w_codes"] {
            let (o, i) = (ct.shape[0], ct.shape[1])
            let codes = [Int8](ct.bytes.map { Int8(bitPattern: $0) })
            return ((0..<(o * i)).map { Float(codes[$0]) * scale[$0 / i] }, o, i)
        }
        let pt = states["w_packed"]!
        let (o, i) = (pt.shape[0], 2 * pt.shape[1])
        let g = i / (scale.count / o)
        let packed = [UInt8](pt.bytes)
        return ((0..<(o * i)).map { k in
            let b = Int(packed[k / 2]); let q = (k % 2 == 0 ? b % 16 : b / 16) - 8
            return Float(q) * scale[k / g]
        }, o, i)
    }

    /// The merged states of one linear: name -> (dtype, shape, little-endian bytes).
    static func merge(_ states: [String: RawTensor], a: [Float], b: [Float], rank: Int, scale: Float,
                      group: Int) throws -> [String: (String, [Int], Data)] {
        var (w, o, i) = try dequantize(states)
        for row in 0..<o { for col in 0..<i {
            var d: Float = 0
            for k in 0..<rank { d += b[row * rank + k] * a[k * i + col] }
            w[row * i + col] += scale * d
        } }
        func f32(_ v: [Float]) -> Data { v.withUnsafeBufferPointer { Data(buffer: $0) } }
        if let wt = states["weight"] { return ["weight": ("F32", wt.shape, f32(w))] }
        let sc = states["w_scale"]!
        if let ct = states["w_codes"] {
            let q = quantize(w, rows: o, groupLen: i, bits: 8)
            return ["w_codes": ("I8", ct.shape, Data(q.codes.map { UInt8(bitPattern: $0) })), "w_scale": ("F32", sc.shape, f32(q.scales))]
        }
        let g = i % group == 0 ? group : i
        let q = quantize(w, rows: o * i / g, groupLen: g, bits: 4)
        let packed = (0..<(q.codes.count / 2)).map { UInt8(Int(q.codes[2 * $0]) + 8 + (Int(q.codes[2 * $0 + 1]) + 8) * 16) }
        return ["w_packed": ("U8", states["w_packed"]!.shape, Data(packed)), "w_scale": ("F32", sc.shape, f32(q.scales))]
    }
}
