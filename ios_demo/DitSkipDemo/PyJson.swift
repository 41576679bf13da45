import Foundation

/// A JSON value with its object keys in order (JSONSerialization's dictionaries have none): what the residual cache
/// writer needs to write its index and journal byte for byte as Python's `json` module does (PyJson.kt's twin).
indirect enum PyValue: Equatable {
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case list([PyValue])
    case object([(String, PyValue)])

    static func == (a: PyValue, b: PyValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case let (.bool(x), .bool(y)): return x == y
        case let (.int(x), .int(y)): return x == y
        case let (.double(x), .double(y)): return x == y
        case let (.string(x), .string(y)): return x == y
        case let (.list(x), .list(y)): return x == y
        case let (.object(x), .object(y)):              // Python dict equality: the same keys and values, any order
            guard x.count == y.count else { return false }
            let ym = Dictionary(y, uniquingKeysWith: { _, last in last })
            return x.allSatisfy { k, v in ym[k] == v }
        default: return false
        }
    }

    subscript(key: String) -> PyValue? {
        if case let .object(pairs) = self { return pairs.last(where: { $0.0 == key })?.1 }
        return nil
    }
    var intValue: Int? { if case let .int(v) = self { return v }; return nil }
    var stringValue: String? { if case let .string(v) = self { return v }; return nil }
    var doubleValue: Double? {
        switch self { case let .double(v): return v; case let .int(v): return Double(v); default: return nil }
    }
    var listValue: [PyValue]? { if case let .list(v) = self { return v }; return nil }
    var pairs: [(String, PyValue)]? { if case let .object(v) = self { return v }; return nil }
}

/// json.dumps / json.loads as Python writes and reads them (PyJson.kt): indent, sort_keys, compact separators,
/// ensure_ascii escapes, floats as Python's repr (shortest round-trip digits; exponent form below 1e-4 and from 1e16).
enum PyJson {
    static func dumps(_ v: PyValue, indent: Int? = nil, sortKeys: Bool = false, compact: Bool = false) -> String {
        var out = ""
        let itemSep = compact || indent != nil ? "," : ", "
        let keySep = compact ? ":" : ": "
        write(&out, v, indent, sortKeys, itemSep, keySep, 0)
        return out
    }

    private static func write(_ out: inout String, _ v: PyValue, _ indent: Int?, _ sortKeys: Bool, _ itemSep: String,
                              _ keySep: String, _ level: Int) {
        func newline(_ l: Int) { if let n = indent { out += "\n" + String(repeating: " ", count: n * l) } }
        switch v {
        case .null: out += "null"
        case let .bool(b): out += b ? "true" : "false"
        case let .int(i): out += String(i)
        case let .double(d): out += floatRepr(d)
        case let .string(s): quote(&out, s)
        case let .list(items):
            if items.isEmpty { out += "\u{5B}\u{5D}"; return }
            out += "\u{5B}"
            for (i, x) in items.enumerated() {
                if i > 0 { out += itemSep }
                newline(level + 1)
                write(&out, x, indent, sortKeys, itemSep, keySep, level + 1)
            }
            newline(level)
            out += "\u{5D}"
        case let .object(pairs):
            if pairs.isEmpty { out += "{}"; return }
            let ordered = sortKeys ? pairs.sorted { Array($0.0.utf16).lexicographicallyPrecedes(Array($1.0.utf16)) } : pairs
            out += "{"
            for (i, kv) in ordered.enumerated() {
                if i > 0 { out += itemSep }
                newline(level + 1)
                quote(&out, kv.0)
                out += keySep
                write(&out, kv.1, indent, sortKeys, itemSep, keySep, level + 1)
            }
            newline(level)
            out += "}"
        }
    }

    private static func quote(_ out: inout String, _ s: String) {
        out += "\""
        for u in s.utf16 {                        // UTF-16 code units: Python's ensure_ascii escapes surrogate pairs
            switch u {
            case 0x22: out += "\\\""
            case 0x5C: out += "\\\\"
            case 0x0A: out += "\\n"
            case 0x0D: out += "\\r"
            case 0x09: out += "\\t"
            case 0x08: out += "\\b"
            case 0x0C: out += "\\f"
            default:
                if u < 0x20 || u > 0x7E { out += String(format: "\\u%04x", UInt32(u)) } else { out += String(UnicodeScalar(UInt8(u))) }
            }
        }
        out += "\""
    }

    /// Python's repr(float), from Swift's shortest round-trip digits (`description`) reformatted.
    static func floatRepr(_ d: Double) -> String {
        if d.isNaN { return "NaN" }
        if d.isInfinite { return d > 0 ? "Infinity" : "-Infinity" }
        if d == 0 { return d.sign == .minus ? "-0.0" : "0.0" }
        let text = "\(abs(d))"
        let parts = text.split(separator: "e", maxSplits: 1).map(String.init)
        let exp10 = parts.count > 1 ? Int(parts[1].replacingOccurrences(of: "+", with: ""))! : 0
        let mp = parts[0].split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        var digits = Array(mp[0] + (mp.count > 1 ? mp[1] : ""))
        var decpt = mp[0].count + exp10
        while digits.count > 1 && digits.first == "0" { digits.removeFirst(); decpt -= 1 }
        while digits.count > 1 && digits.last == "0" { digits.removeLast() }
        let ds = String(digits)
        let sign = d < 0 ? "-" : ""
        if decpt <= -4 || decpt > 16 {
            let mant = ds.count == 1 ? ds : String(ds.prefix(1)) + "." + String(ds.dropFirst())
            let e = decpt - 1
            return sign + mant + "e" + (e < 0 ? "-" : "+") + String(format: "%02d", abs(e))
        }
        if decpt <= 0 { return sign + "0." + String(repeating: "0", count: -decpt) + ds }
        if decpt >= ds.count { return sign + ds + String(repeating: "0", count: decpt - ds.count) + ".0" }
        return sign + String(ds.prefix(decpt)) + "." + String(ds.dropFirst(decpt))
    }

    // ------------------------------------------------------------------------------------------------ reading
    enum ParseError: Error { case malformed(Int) }

    static func parse(_ text: String) throws -> PyValue {
        var p = Parser(s: Array(text.utf16), i: 0)
        p.ws()
        let v = try p.value()
        p.ws()
        guard p.i == p.s.count else { throw ParseError.malformed(p.i) }
        return v
    }

    private struct Parser {
        let s: [UInt16]
        var i: Int

        mutating func ws() { while i < s.count, [0x20, 0x0A, 0x0D, 0x09].contains(s[i]) { i += 1 } }

        func starts(_ w: String) -> Bool {
            let u = Array(w.utf16)
            return i + u.count <= s.count && Array(s[i..<(i + u.count)]) == u
        }

        mutating func value() throws -> PyValue {
            guard i < s.count else { throw ParseError.malformed(i) }
            switch s[i] {
            case 0x7B: return try object()
            case 0x5B: return try list()
            case 0x22: return .string(try string())
            default:
                let literals: [(String, PyValue)] = [("true", .bool(true)), ("false", .bool(false)), ("null", .null),
                    ("NaN", .double(.nan)), ("Infinity", .double(.infinity)), ("-Infinity", .double(-.infinity))]
                for (w, v) in literals where starts(w) { i += w.utf16.count; return v }
                return try number()
            }
        }

        mutating func object() throws -> PyValue {
            var out: [(String, PyValue)] = []
            i += 1; ws()
            if i < s.count && s[i] == 0x7D { i += 1; return .object(out) }
            while true {
                ws()
                guard i < s.count, s[i] == 0x22 else { throw ParseError.malformed(i) }
                let k = try string()
                ws()
                guard i < s.count, s[i] == 0x3A else { throw ParseError.malformed(i) }
                i += 1; ws()
                out.append((k, try value()))
                ws()
                guard i < s.count else { throw ParseError.malformed(i) }
                if s[i] == 0x2C { i += 1; continue }
                guard s[i] == 0x7D else { throw ParseError.malformed(i) }
                i += 1
                return .object(out)
            }
        }

        mutating func list() throws -> PyValue {
            var out: [PyValue] = []
            i += 1; ws()
            if i < s.count && s[i] == 0x5D { i += 1; return .list(out) }
            while true {
                ws()
                out.append(try value())
                ws()
                guard i < s.count else { throw ParseError.malformed(i) }
                if s[i] == 0x2C { i += 1; continue }
                guard s[i] == 0x5D else { throw ParseError.malformed(i) }
                i += 1
                return .list(out)
            }
        }

        mutating func string() throws -> String {
            var units: [UInt16] = []
            i += 1
            while true {
                guard i < s.count else { throw ParseError.malformed(i) }
                let c = s[i]; i += 1
                if c == 0x22 { return String(decoding: units, as: UTF16.self) }
                if c != 0x5C { units.append(c); continue }
                guard i < s.count else { throw ParseError.malformed(i) }
                let e = s[i]; i += 1
                switch e {
                case 0x6E: units.append(0x0A)
                case 0x74: units.append(0x09)
                case 0x72: units.append(0x0D)
                case 0x62: units.append(0x08)
                case 0x66: units.append(0x0C)
                case 0x75:
                    guard i + 4 <= s.count, let u = UInt16(String(decoding: s[i..<(i + 4)], as: UTF16.self), radix: 16)
                    else { throw ParseError.malformed(i) }
                    units.append(u); i += 4
                default: units.append(e)
                }
            }
        }

        mutating func number() throws -> PyValue {
            let start = i
            while i < s.count, let c = UnicodeScalar(s[i]), "0123456789+-.eE".unicodeScalars.contains(c) { i += 1 }
            let t = String(decoding: s[start..<i], as: UTF16.self)
            if t.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }) {
                guard let d = Double(t) else { throw ParseError.malformed(start) }
                return .double(d)
            }
            guard let n = Int(t) else { throw ParseError.malformed(start) }
            return .int(n)
        }
    }
}
