import Foundation

/// One stored part of a cache entry: dtype ("float32", "int8", "uint8"), shape, little-endian bytes.
struct EncodedPart { let dtype: String; let shape: [Int]; let bytes: Data }

/// A float32 tensor in C order (x0, streams, residuals).
struct FloatTensor {
    let shape: [Int]
    let data: [Float]
}

/// One residual's codec (ditskip_edge/runtime/cache_format.py TensorCodec; CacheCodecs.kt).
struct TensorCodec {
    let kind: String                // fp32 | fp16 | int8 | int4 | lowrank
    var axis: String = "token"      // "token": groups of channels within a token; "channel": groups of tokens
    var group: Int = 0              // 0: the whole axis
    var rank: Int = 0

    var spec: String {
        if kind == "fp32" || kind == "fp16" { return kind }
        if kind == "int8" && group == 0 { return "int8-\(axis)" }
        if kind == "int8" || kind == "int4" { return "\(kind)-\(axis == "token" ? "g" : "t")\(group)" }
        return "lowrank-r\(rank)"
    }

    /// [B, N, D] as scale groups: token -> [B, N, D/g, g]; channel -> [B, N/g, g, D] (g not dividing: the whole axis).
    func groupShape(_ s: [Int]) -> [Int] {
        if axis == "channel" {
            let g = group != 0 && s[1] % group == 0 ? group : s[1]
            return [s[0], s[1] / g, g, s[2]]
        }
        let g = group != 0 && s[2] % group == 0 ? group : s[2]
        return [s[0], s[1], s[2] / g, g]
    }

    /// Stored parts in cache_format.py's order: (part, dtype, shape).
    func parts(_ s: [Int]) -> [(String, String, [Int])] {
        let (b, n, d) = (s[0], s[1], s[2])
        if kind == "fp32" { return [("values", "float32", [b, n, d])] }
        if kind == "fp16" { return [("values", "uint8", [b, n, 2 * d])] }
        if kind == "int8" || kind == "int4" {
            let g = groupShape(s)
            let scale = axis == "channel" ? [g[0], g[1], 1, g[3]] : [g[0], g[1], g[2], 1]
            return [("codes", kind == "int8" ? "int8" : "uint8", kind == "int8" ? [b, n, d] : [b, n, d / 2]),
                    ("scale", "float32", scale)]
        }
        let r = min(rank, n, d)
        return [("u.codes", "int8", [b, n, r]), ("u.scale", "float32", [b, 1, r]),
                ("v.codes", "int8", [b, r, d]), ("v.scale", "float32", [b, r, 1])]
    }

    func check(_ name: String, _ s: [Int]) throws {
        guard s.count == 3 else { throw TrainError.bundle("residual '\(name)': expected [B, N, D], got shape \(s)") }
        guard !(kind == "int4" && s[2] % 2 != 0)
        else { throw TrainError.bundle("residual '\(name)': int4 packs channel pairs, D = \(s[2]) is odd") }
    }

    static func parse(_ text: String) throws -> TensorCodec {
        let s = text.trimmingCharacters(in: .whitespaces)
        if s == "fp32" || s == "fp16" { return TensorCodec(kind: s) }
        if s == "int8-token" || s == "int8-channel" { return TensorCodec(kind: "int8", axis: String(s.dropFirst(5))) }
        if s.count > 6, s.hasPrefix("int8-") || s.hasPrefix("int4-"),
           let ax = s.dropFirst(5).first, ax == "g" || ax == "t", let g = Int(s.dropFirst(6)) {
            guard g >= 2, g % 2 == 0, g <= 1 << 20
            else { throw TrainError.bundle("cache codec '\(s)': group size must be an even number in [2, \(1 << 20)]") }
            return TensorCodec(kind: String(s.prefix(4)), axis: ax == "g" ? "token" : "channel", group: g)
        }
        if s.hasPrefix("lowrank-r"), let r = Int(s.dropFirst(9)) {
            guard (1...4096).contains(r) else { throw TrainError.bundle("cache codec '\(s)': rank must be in [1, 4096]") }
            return TensorCodec(kind: "lowrank", rank: r)
        }
        throw TrainError.bundle("unknown cache codec '\(s)': expected fp32, fp16, int8-token, int8-channel, int8-gG, " +
                                "int8-tG, int4-gG, int4-tG, lowrank-rR (or 'DEFAULT,name=CODEC,...')")
    }
}

/// A cache's codec: a default plus per-residual overrides ("int8-channel,front.txt=fp16").
struct CacheCodec {
    let defaultCodec: TensorCodec
    let overrides: [(String, TensorCodec)]

    var spec: String { ([defaultCodec.spec] + overrides.map { "\($0.0)=\($0.1.spec)" }).joined(separator: ",") }

    /// The last override for this name wins, as Python's dict(overrides).
    func forName(_ name: String) -> TensorCodec { overrides.last(where: { $0.0 == name })?.1 ?? defaultCodec }

    /// Every stored part of an entry, flat and in order: "x0", then each residual's "<name>.<part>".
    func parts(_ shapes: [(String, [Int])]) throws -> [(String, String, [Int])] {
        var out: [(String, String, [Int])] = []
        for (name, shape) in shapes {
            if name == BundleContract.x0Key { out.append((name, "float32", shape)); continue }
            let c = forName(name)
            try c.check(name, shape)
            out += c.parts(shape).map { ("\(name).\($0.0)", $0.1, $0.2) }
        }
        return out
    }

    /// Refuse, before any work, a codec this app cannot encode (lowrank: no SVD here), naming it.
    func requireEncodable(_ residuals: [String]) throws {
        for name in residuals where forName(name).kind == "lowrank" {
            throw TrainError.bundle("cache codec \(forName(name).spec) (residual \(name), bundle codec '\(spec)'): this app " +
                "has no lowrank (SVD) encoder; run the subject stage with the Python runtime, or compile the model " +
                "bundle with another --cache-codec")
        }
    }

    static func parse(_ spec: String) throws -> CacheCodec {
        let items = spec.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        let defaults = items.filter { !$0.contains("=") }
        guard defaults.count == 1
        else { throw TrainError.bundle("cache codec '\(spec)': give exactly one default codec, e.g. 'int8-channel'") }
        let over = try items.filter { $0.contains("=") }.map { item -> (String, TensorCodec) in
            let kv = item.split(separator: "=", maxSplits: 1).map(String.init)
            return (kv[0].trimmingCharacters(in: .whitespaces), try TensorCodec.parse(kv[1]))
        }
        return CacheCodec(defaultCodec: try TensorCodec.parse(defaults[0]), overrides: over)
    }
}

/// The device's residual encoders, bit for bit runtime/codecs.py encode_entry (CacheCodecs.kt's CodecEncoder, which
/// tests/test_app_subject_stage.py runs on the JVM against Python): code = round half to even (d / scale), scale =
/// max(absmax / qmax, 1e-12) in float32 per group; int4 two a byte (low nibble = even channel, value = nibble - 8);
/// fp16 clipped to +-65504, rounded half to even, little-endian bytes. lowrank is refused.
enum CodecEncoder {
    static let fp16Max: Float = 65504
    static let minScale: Float = 1e-12

    static func encodeEntry(_ codec: CacheCodec, _ tensors: [(String, FloatTensor)]) throws -> [String: EncodedPart] {
        var out: [String: EncodedPart] = [:]
        for (name, t) in tensors {
            if name == BundleContract.x0Key { out[name] = EncodedPart(dtype: "float32", shape: t.shape, bytes: f32Bytes(t.data)); continue }
            let c = codec.forName(name)
            try c.check(name, t.shape)
            for (p, v) in try encodeTensor(c, t) { out["\(name).\(p)"] = v }
        }
        return out
    }

    static func encodeTensor(_ c: TensorCodec, _ t: FloatTensor) throws -> [(String, EncodedPart)] {
        let (b, n, d) = (t.shape[0], t.shape[1], t.shape[2])
        if c.kind == "fp32" { return [("values", EncodedPart(dtype: "float32", shape: t.shape, bytes: f32Bytes(t.data)))] }
        if c.kind == "fp16" {
            var bytes = [UInt8](repeating: 0, count: 2 * t.data.count)
            for (i, v) in t.data.enumerated() {
                let h = halfBits(max(-fp16Max, min(v, fp16Max)))
                bytes[2 * i] = UInt8(h & 0xFF); bytes[2 * i + 1] = UInt8((h >> 8) & 0xFF)
            }
            return [("values", EncodedPart(dtype: "uint8", shape: [b, n, 2 * d], bytes: Data(bytes)))]
        }
        guard c.kind == "int8" || c.kind == "int4"
        else { throw TrainError.bundle("cache codec \(c.spec): this app has no lowrank (SVD) encoder") }
        let (q, scale, scaleShape) = quantize(c, t)
        let codes: EncodedPart
        if c.kind == "int8" {
            codes = EncodedPart(dtype: "int8", shape: t.shape, bytes: Data(q.map { UInt8(bitPattern: Int8($0)) }))
        } else {
            let packed = (0..<(q.count / 2)).map { UInt8((q[2 * $0] + 8) + 16 * (q[2 * $0 + 1] + 8)) }
            codes = EncodedPart(dtype: "uint8", shape: [b, n, d / 2], bytes: Data(packed))
        }
        return [("codes", codes), ("scale", EncodedPart(dtype: "float32", shape: scaleShape, bytes: f32Bytes(scale)))]
    }

    /// The flat index of element i's scale (channel: scale [B, N/g, 1, D]; token: [B, N, D/g, 1]).
    static func scaleIndex(_ c: TensorCodec, _ shape: [Int], _ gs: [Int], _ i: Int) -> Int {
        let d = shape[2], x = i % d, row = i / d
        if c.axis == "channel" { return ((row / shape[1]) * gs[1] + (row % shape[1]) / gs[2]) * d + x }
        return row * gs[2] + x / gs[3]
    }

    private static func quantize(_ c: TensorCodec, _ t: FloatTensor) -> ([Int], [Float], [Int]) {
        let qmax: Float = c.kind == "int8" ? 127 : 7
        let gs = c.groupShape(t.shape)
        let scaleShape = c.axis == "channel" ? [gs[0], gs[1], 1, gs[3]] : [gs[0], gs[1], gs[2], 1]
        var absmax = [Float](repeating: 0, count: scaleShape.reduce(1, *))
        for (i, v) in t.data.enumerated() {
            let k = scaleIndex(c, t.shape, gs, i)
            absmax[k] = max(absmax[k], abs(v))
        }
        let scale = absmax.map { max($0 / qmax, minScale) }
        let q = t.data.enumerated().map { i, v -> Int in
            let r = (v / scale[scaleIndex(c, t.shape, gs, i)]).rounded(.toNearestOrEven)   // float32 quotient
            return Int(max(-qmax, min(r, qmax)))
        }
        return (q, scale, scaleShape)
    }

    /// float32 -> IEEE binary16 bits, round half to even (numpy's astype(float16)); CacheCodecs.kt halfBits.
    static func halfBits(_ f: Float) -> Int {
        let x = Int(f.bitPattern)
        let sign = (x >> 16) & 0x8000
        let exp = (x >> 23) & 0xFF
        let mant = x & 0x7FFFFF
        if exp == 0xFF { return sign | 0x7C00 | (mant != 0 ? 0x200 : 0) }
        let e = exp - 127 + 15
        if e >= 0x1F { return sign | 0x7C00 }
        if e <= 0 {                                                    // a binary16 subnormal: M * 2^-24
            let s = 126 - exp
            if s > 24 { return sign }
            let full = mant | 0x800000
            let q = full >> s, rem = full & ((1 << s) - 1), half = 1 << (s - 1)
            return sign | ((rem > half || (rem == half && q & 1 == 1)) ? q + 1 : q)
        }
        let lower = mant & 0x1FFF
        let h = (e << 10) | (mant >> 13)
        return sign | ((lower > 0x1000 || (lower == 0x1000 && h & 1 == 1)) ? h + 1 : h)
    }

    static func halfToFloat(_ h: Int) -> Float {
        let sign: Float = h & 0x8000 != 0 ? -1 : 1
        let e = (h >> 10) & 0x1F, m = h & 0x3FF
        if e == 0 { return sign * Float(m) * (1 / 16777216) }
        if e == 0x1F { return m == 0 ? sign * .infinity : .nan }
        return sign * Float(bitPattern: UInt32(((e - 15 + 127) << 23) | (m << 13)))
    }

    /// Stored parts -> the float32 residual (for the coding error the index keeps).
    static func decodeTensor(_ c: TensorCodec, _ parts: [String: EncodedPart], _ shape: [Int]) -> [Float] {
        let n = shape.reduce(1, *)
        let values = "values", codesPart = "codes", scalePart = "scale"
        if c.kind == "fp32" { return floats(parts[values]!.bytes) }
        if c.kind == "fp16" {
            let b = [UInt8](parts[values]!.bytes)
            return (0..<n).map { halfToFloat(Int(b[2 * $0]) | (Int(b[2 * $0 + 1]) << 8)) }
        }
        let codes = [UInt8](parts[codesPart]!.bytes), scale = floats(parts[scalePart]!.bytes), gs = c.groupShape(shape)
        return (0..<n).map { i in
            let q: Float = c.kind == "int8" ? Float(Int8(bitPattern: codes[i]))
                : Float((i % 2 == 0 ? Int(codes[i / 2]) & 0xF : Int(codes[i / 2]) >> 4) - 8)
            return q * scale[scaleIndex(c, shape, gs, i)]
        }
    }

    /// ||dHat - d|| / max(||d||, 1e-30), norms in float64, the result as float32 (runtime/codecs.py relative_error).
    static func relativeError(_ dHat: [Float], _ d: [Float]) -> Double {
        var num = 0.0, den = 0.0
        for i in d.indices { let e = Double(dHat[i] - d[i]); num += e * e; den += Double(d[i]) * Double(d[i]) }
        return Double(Float(num.squareRoot() / max(den.squareRoot(), 1e-30)))
    }

    static func f32Bytes(_ a: [Float]) -> Data {
        var out = Data(capacity: 4 * a.count)
        for v in a { withUnsafeBytes(of: v.bitPattern.littleEndian) { out.append(contentsOf: $0) } }
        return out
    }

    static func floats(_ data: Data) -> [Float] {
        let b = [UInt8](data)
        return (0..<(b.count / 4)).map { i in
            Float(bitPattern: UInt32(b[4 * i]) | UInt32(b[4 * i + 1]) << 8 | UInt32(b[4 * i + 2]) << 16 | UInt32(b[4 * i + 3]) << 24)
        }
    }
}
