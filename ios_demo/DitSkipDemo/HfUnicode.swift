import Foundation

/// UTF-16 code units: the tokenizer port's text, as Kotlin's String is in HfTokenizer.kt: literal equality and the
/// offsets NSRegularExpression reports. Swift's String compares by canonical equivalence ("é" == "e\u{301}", the
/// Angstrom sign == "Å"), which vocabulary lookups must not do.
typealias U16 = [UInt16]

/// What the tokenizer.json steps share (the Swift twin of HfUnicode.kt and ditskip_edge/runtime/tokenizer/unicode.py):
/// character classes, tokenizer.json regexes (Oniguruma) translated to ICU's syntax (NSRegularExpression; the same
/// pattern text the Kotlin port gives java.util.regex), grapheme clusters. Offsets are UTF-16 offsets on code point
/// boundaries; per-character rules read code points.
///
///   classBody        \p{L}, \p{N}, \w, \s as the port defines them: L and N are general categories; \w is L + M + Nd +
///                    Nl + Pc + ZWNJ/ZWJ; \s is Unicode White_Space (never ICU's own \w / \s)
///   translateRegex   Oniguruma (Ruby syntax) -> NSRegularExpression with anchorsMatchLines + useUnixLineSeparators
///                    (^ $ . see only \n, as Python's re.MULTILINE); \d -> \p{Nd}, \v -> the VT character, a { that
///                    opens no quantifier -> \{, {,n} -> {0,n}; \b \B are refused
///   graphemes        text -> clusters, the port's short rule set (what Precompiled looks up)
enum HfUnicode {
    /// Unicode White_Space: what `tokenizers` strips and splits on.
    static let whiteSpace: [ClosedRange<UInt32>] = [0x09...0x0D, 0x20...0x20, 0x85...0x85, 0xA0...0xA0, 0x1680...0x1680,
                                                    0x2000...0x200A, 0x2028...0x2029, 0x202F...0x202F, 0x205F...0x205F,
                                                    0x3000...0x3000]
    /// Python's str.isspace(): White_Space plus the separators 0x1C-0x1F (str.strip() removes these).
    static let pySpace: [ClosedRange<UInt32>] = whiteSpace + [0x1C...0x1F]
    static let unsupportedEscapes: Set<Unicode.Scalar> = ["h", "H", "R", "X", "K", "G", "k", "g", "y", "Y", "O", "x", "b", "B"]
    static let propertyNames: Set<String> = ["L", "Letter", "N", "Number"]
    static let options: NSRegularExpression.Options = [.anchorsMatchLines, .useUnixLineSeparators]

    static func u16(_ s: String) -> U16 { Array(s.utf16) }
    static func string(_ t: U16) -> String { String(decoding: t, as: UTF16.self) }

    /// The code point at offset i and its length in code units (1, or 2 for a surrogate pair).
    static func codePoint(_ t: U16, _ i: Int) -> (cp: UInt32, width: Int) {
        let a = UInt32(t[i])
        if (0xD800..<0xDC00).contains(a) && i + 1 < t.count && (0xDC00..<0xE000).contains(UInt32(t[i + 1])) {
            return (0x10000 + ((a - 0xD800) << 10) + (UInt32(t[i + 1]) - 0xDC00), 2)
        }
        return (a, 1)
    }

    static func codePointBefore(_ t: U16, _ i: Int) -> UInt32 {
        if i >= 2 && (0xDC00..<0xE000).contains(UInt32(t[i - 1])) && (0xD800..<0xDC00).contains(UInt32(t[i - 2])) {
            return codePoint(t, i - 2).cp
        }
        return UInt32(t[i - 1])
    }

    static func codePoints(_ t: U16) -> [UInt32] {
        var out: [UInt32] = []
        var i = 0
        while i < t.count { let (cp, w) = codePoint(t, i); out.append(cp); i += w }
        return out
    }

    static func units(_ cp: UInt32) -> U16 {
        if cp < 0x10000 { return [UInt16(cp)] }
        let v = cp - 0x10000
        return [UInt16(0xD800 + (v >> 10)), UInt16(0xDC00 + (v & 0x3FF))]
    }

    static func units(_ cps: ArraySlice<UInt32>) -> U16 { cps.flatMap { units($0) } }

    static func category(_ cp: UInt32) -> Unicode.GeneralCategory {
        guard let s = Unicode.Scalar(cp) else { return .surrogate }
        return s.properties.generalCategory
    }

    static func isSpace(_ cp: UInt32) -> Bool { whiteSpace.contains { $0.contains(cp) } }
    static func isPySpace(_ cp: UInt32) -> Bool { pySpace.contains { $0.contains(cp) } }

    /// The port's \w: letters, marks, decimal and letter numbers, connector punctuation, ZWNJ, ZWJ.
    static func isWordChar(_ cp: UInt32) -> Bool {
        switch category(cp) {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter, .nonspacingMark,
             .enclosingMark, .spacingMark, .decimalNumber, .letterNumber, .connectorPunctuation: return true
        default: return cp == 0x200C || cp == 0x200D
        }
    }

    static func isNumber(_ cp: UInt32) -> Bool {
        switch category(cp) {
        case .decimalNumber, .letterNumber, .otherNumber: return true
        default: return false
        }
    }

    static func isMark(_ cp: UInt32) -> Bool {
        switch category(cp) {
        case .nonspacingMark, .enclosingMark, .spacingMark: return true
        default: return false
        }
    }

    /// Python's str.strip(): leading and trailing str.isspace() characters removed.
    static func pyStrip(_ t: U16) -> U16 {
        var i = 0, j = t.count
        while i < j, isPySpace(codePoint(t, i).cp) { i += codePoint(t, i).width }
        while j > i, isPySpace(codePointBefore(t, j)) { j -= codePointBefore(t, j) >= 0x10000 ? 2 : 1 }
        return Array(t[i..<j])
    }

    static func hex(_ v: UInt32) -> String { String(v, radix: 16, uppercase: true) }

    static func isAsciiWordChar(_ s: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(s) || ("A"..."Z").contains(s) || ("0"..."9").contains(s) || s == "_"
    }

    /// The inside of a character class for "L", "N", "w" or "s".
    static func classBody(_ name: Unicode.Scalar) -> String {
        if name == "L" { return "\\p{L}" }
        if name == "N" { return "\\p{N}" }
        if name == "w" { return "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}" }
        return whiteSpace.map { r in
            r.lowerBound == r.upperBound ? "\\x{\(hex(r.lowerBound))}" : "\\x{\(hex(r.lowerBound))}-\\x{\(hex(r.upperBound))}"
        }.joined()
    }

    /// A tokenizer.json regex (Oniguruma, Ruby syntax) compiled; TrainError.bundle naming `path` when it uses something
    /// the translation does not express (other \p classes, negated classes inside brackets, nested classes, POSIX
    /// brackets, \h \R \X \K \G \x{..} \b ...).
    static func translateRegex(_ pattern: String, _ path: String) throws -> NSRegularExpression {
        let p = Array(pattern.unicodeScalars)               // code points, as the Python port reads the pattern
        let n = p.count
        var out = "", i = 0, inClass = false
        func fail(_ what: String) -> TrainError { TrainError.bundle("\(path): regex '\(pattern)': \(what) is not supported") }
        while i < n {
            let c = p[i]
            if c == "\\" && i + 1 < n {
                let e = p[i + 1]
                if e == "p" || e == "P" {
                    var j = i + 2, negated = false, name = ""
                    var closed = false
                    if j < n && p[j] == "{" {
                        j += 1
                        if j < n && p[j] == "^" { negated = true; j += 1 }
                        while j < n && isAsciiWordChar(p[j]) { name.unicodeScalars.append(p[j]); j += 1 }
                        closed = j < n && p[j] == "}" && !name.isEmpty
                    }
                    if !closed || e == "P" || negated || !propertyNames.contains(name) {
                        throw fail("\\\(e)" + (closed ? "{" + (negated ? "^" : "") + name + "}" : ""))
                    }
                    let body = classBody(name.hasPrefix("L") ? "L" : "N")
                    out += inClass ? body : "[\(body)]"
                    i = j + 1
                    continue
                }
                if e == "s" || e == "S" || e == "w" || e == "W" {
                    let body = classBody(e == "s" || e == "S" ? "s" : "w")
                    let upper = e == "S" || e == "W"
                    if upper && inClass { throw fail("\\\(e) inside [...]") }
                    out += inClass ? body : (upper ? "[^\(body)]" : "[\(body)]")
                } else if e == "d" {
                    out += "\\p{Nd}"
                } else if e == "D" {
                    out += "\\P{Nd}"
                } else if e == "v" {
                    out += "\\x{B}"
                } else if e == "z" && !inClass {
                    out += "\\z"
                } else if e == "Z" && !inClass {
                    out += "(?=\\n?\\z)"
                } else if unsupportedEscapes.contains(e) {
                    throw fail("\\\(e)")
                } else {
                    out.unicodeScalars.append(c)
                    out.unicodeScalars.append(e)
                }
                i += 2
                continue
            }
            if c == "[" {
                if inClass { throw fail("a nested class or POSIX bracket [...[...]...]") }
                inClass = true
                out.unicodeScalars.append(c)
                i += 1
                if i < n && p[i] == "^" { out.append("^"); i += 1 }
                if i < n && p[i] == "]" { out += "\\]"; i += 1 }       // a leading ] is a literal in Ruby syntax
                continue
            }
            if !inClass && c == "{" {                  // a quantifier, else a literal { (ICU refuses a bare one)
                var j = i + 1, low = "", high: String? = nil
                while j < n && ("0"..."9").contains(p[j]) { low.unicodeScalars.append(p[j]); j += 1 }
                if j < n && p[j] == "," {
                    var h = ","
                    j += 1
                    while j < n && ("0"..."9").contains(p[j]) { h.unicodeScalars.append(p[j]); j += 1 }
                    high = h
                }
                if j < n && p[j] == "}" && (!low.isEmpty || (high?.count ?? 1) > 1) {
                    out += "{" + (low.isEmpty ? "0" : low) + (high ?? "") + "}"
                    i = j + 1
                } else {
                    out += "\\{"
                    i += 1
                }
                continue
            }
            if !inClass && c == "}" { out += "\\}"; i += 1; continue }
            if c == "]" && inClass {
                inClass = false
            } else if inClass && c == "&" && i + 1 < n && p[i + 1] == "&" {
                throw fail("class intersection &&")
            }
            out.unicodeScalars.append(c)
            i += 1
        }
        do {
            return try NSRegularExpression(pattern: out, options: options)
        } catch {
            throw TrainError.bundle("\(path): regex '\(pattern)' does not compile as an ICU regex (\(error))")
        }
    }

    /// A Split / Replace `pattern` field: {"String": literal} or {"Regex": oniguruma pattern}.
    static func compilePattern(_ spec: [String: Any], _ path: String) throws -> NSRegularExpression {
        if let s = spec["String"] as? String {
            return try NSRegularExpression(pattern: NSRegularExpression.escapedPattern(for: s), options: [])
        }
        if let r = spec["Regex"] as? String { return try translateRegex(r, path) }
        throw TrainError.bundle("\(path): pattern \(spec) is neither String nor Regex")
    }

    /// (start, end) UTF-16 offsets of every match, left to right.
    static func matches(_ regex: NSRegularExpression, _ t: U16) -> [(Int, Int)] {
        regex.matches(in: string(t), options: [], range: NSRange(location: 0, length: t.count))
            .map { ($0.range.location, $0.range.location + $0.range.length) }
    }

    static func hangulKind(_ cp: UInt32) -> String {
        if (0x1100...0x115F).contains(cp) || (0xA960...0xA97C).contains(cp) { return "L" }
        if (0x1160...0x11A7).contains(cp) || (0xD7B0...0xD7C6).contains(cp) { return "V" }
        if (0x11A8...0x11FF).contains(cp) || (0xD7CB...0xD7FB).contains(cp) { return "T" }
        if (0xAC00...0xD7A3).contains(cp) { return (cp - 0xAC00) % 28 == 0 ? "LV" : "LVT" }
        return ""
    }

    static func isControl(_ cp: UInt32) -> Bool {
        switch category(cp) {
        case .control, .lineSeparator, .paragraphSeparator: return true
        case .format: return cp != 0x200C && cp != 0x200D
        default: return false
        }
    }

    static func isExtend(_ cp: UInt32) -> Bool {
        isMark(cp) || cp == 0x200C || cp == 0x200D || cp == 0xFF9E || cp == 0xFF9F || (0x1F3FB...0x1F3FF).contains(cp)
            || (0xE0020...0xE007F).contains(cp)
    }

    static func isPictographic(_ cp: UInt32) -> Bool {
        (0x1F000...0x1FAFF).contains(cp) || (cp >= 0xA9 && category(cp) == .otherSymbol)
    }

    static func isRegional(_ cp: UInt32) -> Bool { (0x1F1E6...0x1F1FF).contains(cp) }

    /// No grapheme break between the cluster cps[start..<end] and `cp` (the UAX #29 rules that matter for prompts).
    static func joins(_ cps: [UInt32], _ start: Int, _ end: Int, _ cp: UInt32) -> Bool {
        let last = cps[end - 1]
        if last == 0x0D { return cp == 0x0A }
        if isControl(last) || isControl(cp) { return false }
        let a = hangulKind(last), b = hangulKind(cp)
        if (a == "L" && ["L", "V", "LV", "LVT"].contains(b)) || (["LV", "V"].contains(a) && ["V", "T"].contains(b))
            || (["LVT", "T"].contains(a) && b == "T") { return true }
        if isExtend(cp) { return true }
        if last == 0x200D && isPictographic(cp) && cps[start..<end].contains(where: isPictographic) { return true }
        return isRegional(cp) && cps[start..<end].allSatisfy(isRegional) && (end - start) % 2 == 1
    }

    /// Grapheme clusters of `t`, each as code units.
    static func graphemes(_ t: U16) -> [U16] {
        let cps = codePoints(t)
        var out: [U16] = []
        var start = 0
        if cps.isEmpty { return out }
        for k in 1...cps.count {
            if k == cps.count || !joins(cps, start, k, cps[k]) {
                out.append(units(cps[start..<k]))
                start = k
            }
        }
        return out
    }
}
