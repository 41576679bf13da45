import Foundation

/// A piece of text for the pre-tokenizer: (text, starts the text: for Metaspace prepend_scheme "first").
typealias HfPiece = (text: U16, first: Bool)
typealias HfPreTokenize = ([HfPiece]) -> [HfPiece]

/// The `pre_tokenizer` step (HfPreTokenizers.kt, ditskip_edge/runtime/tokenizer/pre_tokenizers.py): a tokenizer.json
/// `pre_tokenizer` entry -> a function over pieces, each resulting piece one word for the model. Sequence, Split
/// (String or Regex; Removed / Isolated / MergedWithPrevious / MergedWithNext / Contiguous; invert), ByteLevel (GPT-2
/// bytes_to_unicode; add_prefix_space; use_regex), Metaspace (replacement, prepend_scheme always / first / never,
/// split), Whitespace, WhitespaceSplit, Digits; any other type is refused naming its path. The splitting helpers are
/// `tokenizers`' Pattern::find_matches and NormalizedString::split; offsets are UTF-16 offsets on code point boundaries.
enum HfPreTokenizers {
    struct Seg { let start: Int; let end: Int; let match: Bool }

    static let behaviors = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
    static let gpt2Split = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

    /// GPT-2's reversible byte -> printable character table (ByteLevel).
    static let byteChars: [U16] = {
        var table = [UInt32?](repeating: nil, count: 256)
        for b in Array(0x21...0x7E) + Array(0xA1...0xAC) + Array(0xAE...0xFF) { table[b] = UInt32(b) }
        var n: UInt32 = 0
        for b in 0..<256 where table[b] == nil { table[b] = 256 + n; n += 1 }
        return table.map { HfUnicode.units($0!) }
    }()

    /// (start, end, is_match) covering t, as find_matches for a regex.
    static func regexSegments(_ regex: NSRegularExpression, _ t: U16) -> [Seg] {
        if t.isEmpty { return [Seg(start: 0, end: 0, match: false)] }
        var segs: [Seg] = []
        var prev = 0
        for (a, b) in HfUnicode.matches(regex, t) {
            if prev != a { segs.append(Seg(start: prev, end: a, match: false)) }
            segs.append(Seg(start: a, end: b, match: true))
            prev = b
        }
        if prev != t.count { segs.append(Seg(start: prev, end: t.count, match: false)) }
        return segs
    }

    /// As find_matches for a character predicate: every matching code point is a segment of its own.
    static func charSegments(_ isMatch: (UInt32) -> Bool, _ t: U16) -> [Seg] {
        var segs: [Seg] = []
        var last = 0, i = 0
        while i < t.count {
            let (cp, w) = HfUnicode.codePoint(t, i)
            if isMatch(cp) {
                if last < i { segs.append(Seg(start: last, end: i, match: false)) }
                segs.append(Seg(start: i, end: i + w, match: true))
                last = i + w
            }
            i += w
        }
        if last < t.count { segs.append(Seg(start: last, end: t.count, match: false)) }
        return segs
    }

    /// NormalizedString::split: which (start, end) pieces a SplitDelimiterBehavior keeps (the behavior is one of
    /// `behaviors`: build checks it).
    static func splitBy(_ segments: [Seg], _ behavior: String, invert: Bool = false) -> [(Int, Int)] {
        let segs = segments.map { Seg(start: $0.start, end: $0.end, match: $0.match != invert) }
        if behavior == "Removed" { return segs.filter { !$0.match }.map { ($0.start, $0.end) } }
        if behavior == "Isolated" { return segs.map { ($0.start, $0.end) } }
        var acc: [(Int, Int)] = []
        var prev = false
        if behavior == "Contiguous" {
            for s in segs {
                if s.match == prev && !acc.isEmpty { acc[acc.count - 1].1 = s.end } else { acc.append((s.start, s.end)) }
                prev = s.match
            }
        } else if behavior == "MergedWithPrevious" {
            for s in segs {
                if s.match && !prev && !acc.isEmpty { acc[acc.count - 1].1 = s.end } else { acc.append((s.start, s.end)) }
                prev = s.match
            }
        } else if behavior == "MergedWithNext" {
            for s in segs.reversed() {
                if s.match && !prev && !acc.isEmpty { acc[acc.count - 1].0 = s.start } else { acc.append((s.start, s.end)) }
                prev = s.match
            }
            acc.reverse()
        }
        return acc
    }

    /// Lift `text -> spans` to a pre-tokenizer over pieces; empty pieces are dropped.
    static func splitter(_ splitOne: @escaping (U16) -> [(Int, Int)]) -> HfPreTokenize {
        return { pieces in
            var out: [HfPiece] = []
            for p in pieces {
                for (a, b) in splitOne(p.text) where b > a { out.append((text: Array(p.text[a..<b]), first: p.first && a == 0)) }
            }
            return out
        }
    }

    static func byteLevel(_ spec: [String: Any], _ path: String) throws -> HfPreTokenize {
        let addPrefixSpace = spec["add_prefix_space"] as? Bool ?? true
        var regex: NSRegularExpression? = nil
        if spec["use_regex"] as? Bool ?? true { regex = try HfUnicode.translateRegex(gpt2Split, path) }
        let table = byteChars
        return { [regex] pieces in
            var out: [HfPiece] = []
            for p in pieces {
                let text: U16 = addPrefixSpace && p.text.first != 0x20 ? [0x20] + p.text : p.text
                let spans = regex.map { HfPreTokenizers.splitBy(HfPreTokenizers.regexSegments($0, text), "Isolated") }
                    ?? [(0, text.count)]
                for (a, b) in spans where b > a {
                    var word: U16 = []
                    for byte in HfUnicode.string(Array(text[a..<b])).utf8 { word += table[Int(byte)] }
                    out.append((text: word, first: p.first && a == 0))
                }
            }
            return out
        }
    }

    static func metaspace(_ spec: [String: Any], _ path: String) throws -> HfPreTokenize {
        let repl = HfUnicode.u16(spec["replacement"] as? String ?? "\u{2581}")
        let scheme = spec["add_prefix_space"] as? Bool == false ? "never" : (spec["prepend_scheme"] as? String ?? "always")
        guard ["always", "first", "never"].contains(scheme)
        else { throw TrainError.bundle("\(path): prepend_scheme '\(scheme)' is not supported") }
        let split = spec["split"] as? Bool ?? true
        return { pieces in
            var out: [HfPiece] = []
            for p in pieces {
                var text: U16 = []
                for u in p.text { if u == 0x20 { text += repl } else { text.append(u) } }
                if !text.starts(with: repl) && (scheme == "always" || (scheme == "first" && p.first)) { text = repl + text }
                let spans = split
                    ? HfPreTokenizers.splitBy(HfPreTokenizers.charSegments({ HfUnicode.units($0) == repl }, text), "MergedWithNext")
                    : [(0, text.count)]
                for (a, b) in spans where b > a { out.append((text: Array(text[a..<b]), first: p.first && a == 0)) }
            }
            return out
        }
    }

    /// A pieces -> pieces function for a `pre_tokenizer` entry (nil: identity).
    static func build(_ spec: [String: Any]?, _ path: String = "pre_tokenizer") throws -> HfPreTokenize {
        guard let spec = spec else { return { $0 } }
        let kind = spec["type"] as? String ?? ""
        if kind == "Sequence" {
            let list = spec["pretokenizers"] as? [[String: Any]] ?? []
            var steps: [HfPreTokenize] = []
            for (i, s) in list.enumerated() { steps.append(try build(s, "\(path).pretokenizers[\(i)]")) }
            return { pieces in steps.reduce(pieces) { acc, step in step(acc) } }
        }
        if kind == "Split" {
            guard let pattern = spec["pattern"] as? [String: Any], let behavior = spec["behavior"] as? String
            else { throw TrainError.bundle("\(path): Split needs pattern and behavior") }
            let regex = try HfUnicode.compilePattern(pattern, path)
            let invert = spec["invert"] as? Bool ?? false
            guard behaviors.contains(behavior) else { throw TrainError.bundle("\(path): behavior '\(behavior)' is not supported") }
            return splitter { HfPreTokenizers.splitBy(HfPreTokenizers.regexSegments(regex, $0), behavior, invert: invert) }
        }
        if kind == "ByteLevel" { return try byteLevel(spec, path) }
        if kind == "Metaspace" { return try metaspace(spec, path) }
        if kind == "Whitespace" {
            let regex = try HfUnicode.translateRegex("\\w+|[^\\w\\s]+", path)
            return splitter { HfPreTokenizers.splitBy(HfPreTokenizers.regexSegments(regex, $0), "Removed", invert: true) }
        }
        if kind == "WhitespaceSplit" {
            return splitter { HfPreTokenizers.splitBy(HfPreTokenizers.charSegments(HfUnicode.isSpace, $0), "Removed") }
        }
        if kind == "Digits" {
            let behavior = (spec["individual_digits"] as? Bool ?? false) ? "Isolated" : "Contiguous"
            return splitter { HfPreTokenizers.splitBy(HfPreTokenizers.charSegments(HfUnicode.isNumber, $0), behavior) }
        }
        throw TrainError.bundle("\(path): type '\(kind)' is not supported")
    }
}
