import Foundation

typealias HfNormalize = (U16) -> U16

/// The `normalizer` step (HfNormalizers.kt, ditskip_edge/runtime/tokenizer/normalizers.py): a tokenizer.json
/// `normalizer` entry -> a text -> text function. Sequence, NFC/NFD/NFKC/NFKD (Foundation's canonical / compatibility
/// mappings), Lowercase (per code point, as Rust's char::to_lowercase), Replace (String or Regex), Prepend, Strip,
/// StripAccents, Precompiled (SentencePiece's charsmap); any other type is refused naming its path in the JSON.
enum HfNormalizers {
    static func build(_ spec: [String: Any]?, _ path: String = "normalizer") throws -> HfNormalize {
        guard let spec = spec else { return { $0 } }
        let kind = spec["type"] as? String ?? ""
        if kind == "Sequence" {
            let list = spec["normalizers"] as? [[String: Any]] ?? []
            var steps: [HfNormalize] = []
            for (i, s) in list.enumerated() { steps.append(try build(s, "\(path).normalizers[\(i)]")) }
            return { t in steps.reduce(t) { acc, step in step(acc) } }
        }
        if kind == "NFC" { return { HfUnicode.u16(HfUnicode.string($0).precomposedStringWithCanonicalMapping) } }
        if kind == "NFD" { return { HfUnicode.u16(HfUnicode.string($0).decomposedStringWithCanonicalMapping) } }
        if kind == "NFKC" { return { HfUnicode.u16(HfUnicode.string($0).precomposedStringWithCompatibilityMapping) } }
        if kind == "NFKD" { return { HfUnicode.u16(HfUnicode.string($0).decomposedStringWithCompatibilityMapping) } }
        if kind == "Lowercase" { return { HfNormalizers.lowercase($0) } }
        if kind == "Replace" {
            guard let pattern = spec["pattern"] as? [String: Any], let content = spec["content"] as? String
            else { throw TrainError.bundle("\(path): Replace needs pattern and content") }
            let regex = try HfUnicode.compilePattern(pattern, path)
            let template = NSRegularExpression.escapedTemplate(for: content)
            return { t in
                HfUnicode.u16(regex.stringByReplacingMatches(in: HfUnicode.string(t), options: [],
                                                             range: NSRange(location: 0, length: t.count), withTemplate: template))
            }
        }
        if kind == "Prepend" {
            let prepend = HfUnicode.u16(spec["prepend"] as? String ?? "")
            return { $0.isEmpty ? $0 : prepend + $0 }
        }
        if kind == "Strip" {
            let left = spec["strip_left"] as? Bool ?? false, right = spec["strip_right"] as? Bool ?? false
            return { HfNormalizers.strip($0, left: left, right: right) }
        }
        if kind == "StripAccents" { return { HfNormalizers.stripAccents($0) } }
        if kind == "Precompiled" {
            var bytes = Data()
            if let b64 = spec["precompiled_charsmap"] as? String { bytes = Data(base64Encoded: b64) ?? Data() }
            else if let list = spec["precompiled_charsmap"] as? [Int] { bytes = Data(list.map { UInt8(truncatingIfNeeded: $0) }) }
            if bytes.isEmpty { return { $0 } }
            let charsmap = try Precompiled(bytes, path)
            return { charsmap.apply($0) }
        }
        throw TrainError.bundle("\(path): type '\(kind)' is not supported")
    }

    /// Per code point, as `"".join(c.lower() for c in s)` (no context: a lone capital sigma is always σ).
    static func lowercase(_ t: U16) -> U16 {
        var out: U16 = []
        out.reserveCapacity(t.count)
        for cp in HfUnicode.codePoints(t) {
            if cp < 0x80 { out.append(UInt16(cp >= 0x41 && cp <= 0x5A ? cp + 0x20 : cp)) }
            else if let s = Unicode.Scalar(cp) { out += HfUnicode.u16(s.properties.lowercaseMapping) }
            else { out += HfUnicode.units(cp) }
        }
        return out
    }

    static func stripAccents(_ t: U16) -> U16 {
        HfUnicode.units(ArraySlice(HfUnicode.codePoints(t).filter { !HfUnicode.isMark($0) }))
    }

    static func strip(_ t: U16, left: Bool, right: Bool) -> U16 {
        var i = 0, j = t.count
        while left && i < j && HfUnicode.isSpace(UInt32(t[i])) { i += 1 }        // White_Space is all in the BMP
        while right && j > i && HfUnicode.isSpace(UInt32(t[j - 1])) { j -= 1 }
        return Array(t[i..<j])
    }
}

/// SentencePiece's precompiled charsmap: a darts-clone double-array trie over UTF-8 keys, then a pool of NUL-terminated
/// replacements. A grapheme cluster under 6 UTF-8 bytes is looked up whole; otherwise (or with no hit) each code point
/// is. A lookup takes the *shortest* key that prefixes the chunk, as `spm_precompiled` does.
final class Precompiled {
    static let wholeGraphemeBytes = 6           // graphemes shorter than this are looked up whole
    private let units: [UInt32]
    private let pool: [UInt8]

    init(_ charsmap: Data, _ path: String) throws {
        let b = [UInt8](charsmap)
        func le32(_ o: Int) -> UInt32 { UInt32(b[o]) | UInt32(b[o + 1]) << 8 | UInt32(b[o + 2]) << 16 | UInt32(b[o + 3]) << 24 }
        guard b.count >= 4, 4 + Int(le32(0)) <= b.count
        else { throw TrainError.bundle("\(path): precompiled_charsmap is truncated") }
        let trieBytes = Int(le32(0))
        units = (0..<(trieBytes / 4)).map { le32(4 + 4 * $0) }
        pool = Array(b[(4 + trieBytes)...])
    }

    private func offset(_ unit: UInt32) -> Int { Int((unit >> 10) << ((unit & (1 << 9)) >> 6)) }

    func transform(_ chunk: U16) -> U16? {
        var pos = offset(units[0])
        for byte in Array(HfUnicode.string(chunk).utf8) {
            if byte == 0 { return nil }
            pos ^= Int(byte)
            guard pos < units.count else { return nil }
            let unit = units[pos]
            if unit & ((1 << 31) | 0xFF) != UInt32(byte) { return nil }
            pos ^= offset(unit)
            if (unit >> 8) & 1 != 0 {
                guard pos < units.count else { return nil }
                let start = Int(units[pos] & 0x7FFF_FFFF)
                var end = start
                while end < pool.count && pool[end] != 0 { end += 1 }
                return HfUnicode.u16(String(decoding: pool[min(start, end)..<end], as: UTF8.self))
            }
        }
        return nil
    }

    func apply(_ t: U16) -> U16 {
        var out: U16 = []
        for g in HfUnicode.graphemes(t) {
            if HfUnicode.string(g).utf8.count < Precompiled.wholeGraphemeBytes, let norm = transform(g) { out += norm; continue }
            var i = 0
            while i < g.count {
                let w = HfUnicode.codePoint(g, i).width
                let ch = Array(g[i..<(i + w)])
                out += transform(ch) ?? ch
                i += w
            }
        }
        return out
    }
}
