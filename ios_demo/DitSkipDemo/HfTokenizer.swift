import Foundation

/// A Hugging Face tokenizer.json run without `tokenizers`, the Swift twin of HfTokenizer.kt and
/// ditskip_edge/runtime/tokenizer/ (hf.py here; the steps in HfUnicode.swift, HfNormalizers.swift,
/// HfPreTokenizers.swift, HfModels.swift): the prompt's ids as `transformers`' tokenizer(text, padding="max_length",
/// max_length=maxLen, truncation=True) gives them, for the real text encoders of FLUX.1 (CLIP, T5) and SANA (Gemma-2):
///
///   added tokens     `added_tokens` found literally become whole tokens first, leftmost-longest (normalized=false in
///                    the raw text, normalized=true in the normalized text of what is left)
///   normalizer       HfNormalizers
///   pre-tokenizer    HfPreTokenizers
///   model            HfModel (BPE, Unigram, WordLevel)
///   post-processor   the special-token ids before and after the sequence (TemplateProcessing with one $A,
///                    RobertaProcessing, BertProcessing, ByteLevel, Sequence)
///   truncation       pieces cut to maxLen minus the specials, so the specials survive
///   padding          right, with padId (the manifest's pad_id; else the JSON's `padding.pad_id`, else the first of
///                    <pad>, <|endoftext|>, [PAD] in added_tokens, then in the vocabulary); mask 0 on pads
///
/// Any other component type is refused naming its path in the JSON. Works on code points over UTF-16 units (U16), as
/// the Kotlin port does; not compiled on CI (no Swift compiler there): the Kotlin port is the one run against Python.
final class HfTokenizer {
    static let padNames = ["<pad>", "<|endoftext|>", "[PAD]"]
    let maxLen: Int
    let padId: Int
    private let normalize: HfNormalize
    private let preTokenize: HfPreTokenize
    private let model: HfModel
    private let before: [Int]
    private let after: [Int]
    private let added: HfAddedTokens

    init(doc: [String: Any], maxLen: Int, padId: Int? = nil) throws {
        let normalize = try HfNormalizers.build(doc["normalizer"] as? [String: Any])
        guard let modelSpec = doc["model"] as? [String: Any] else { throw TrainError.bundle("model: missing") }
        let model = try HfModels.build(modelSpec)
        let added = try HfAddedTokens(doc["added_tokens"] as? [[String: Any]] ?? [], normalize)
        let (before, after) = try HfTokenizer.postProcessor(doc["post_processor"] as? [String: Any])
        guard maxLen >= before.count + after.count else {
            throw TrainError.bundle("max_len \(maxLen) leaves no room next to the post-processor's \(before.count + after.count) special tokens")
        }
        var pad = padId
        if pad == nil, let padding = doc["padding"] as? [String: Any] { pad = padding["pad_id"] as? Int }
        for table in [added.ids, model.vocab] where pad == nil {
            pad = HfTokenizer.padNames.lazy.compactMap { table[HfUnicode.u16($0)] }.first
        }
        guard let resolvedPad = pad else {
            throw TrainError.bundle("no pad token: the JSON has no `padding` and none of \(HfTokenizer.padNames.joined(separator: ", ")) is in the vocabulary; pass pad_id")
        }
        self.normalize = normalize
        self.preTokenize = try HfPreTokenizers.build(doc["pre_tokenizer"] as? [String: Any])
        self.model = model
        self.added = added
        self.before = before
        self.after = after
        self.maxLen = maxLen
        self.padId = resolvedPad
    }

    /// The tokenizer.json file's tokenizer; errors name the file.
    static func fromFile(_ url: URL, maxLen: Int, padId: Int? = nil) throws -> HfTokenizer {
        do {
            guard let doc = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any]
            else { throw TrainError.bundle("not a JSON object") }
            return try HfTokenizer(doc: doc, maxLen: maxLen, padId: padId)
        } catch TrainError.bundle(let message) {
            throw TrainError.bundle("\(url.path): \(message)")
        } catch {
            throw TrainError.bundle("\(url.path): \(error)")
        }
    }

    /// The prompt's ids before the post-processor's special tokens, truncation and padding.
    func tokenIds(_ text: U16) throws -> [Int] {
        var ids: [Int] = []
        for (a, b, tid) in added.split(text, raw: true) {
            if let t = tid { ids.append(t); continue }
            let part = normalize(Array(text[a..<b]))
            for (c, d, tid2) in added.split(part, raw: false) {
                if let t = tid2 { ids.append(t) }
                else if d > c {                                  // empty splits are dropped, as in `tokenizers`
                    for piece in preTokenize([(text: Array(part[c..<d]), first: a == 0 && c == 0)]) {
                        ids += try model.tokenize(piece.text)
                    }
                }
            }
        }
        return ids
    }

    /// Tokens the encoder would read without truncation, special tokens included: generation refuses a prompt above
    /// maxLen for the encoder that limits the prompt.
    func countTokens(_ text: String) throws -> Int {
        let n = try tokenIds(HfUnicode.u16(text)).count
        return before.count + n + after.count
    }

    /// (input_ids, attention_mask), each maxLen long.
    func encode(_ text: String) throws -> (ids: [Int64], mask: [Int64]) {
        let pieces = try tokenIds(HfUnicode.u16(text))
        let ids = before + pieces.prefix(maxLen - before.count - after.count) + after
        let pad = Int64(padId)
        return ((0..<maxLen).map { $0 < ids.count ? Int64(ids[$0]) : pad }, (0..<maxLen).map { $0 < ids.count ? 1 : 0 })
    }

    /// A pipeline's own prompt preprocessing before its tokenizer (generation.text.encoders[].tokenizer.preprocess;
    /// SanaPipeline lower-cases and strips): Python's str.lower() (full case mapping, final sigma; Swift's lowercased()
    /// has no final sigma) and str.strip() (its whitespace set, not trimmingCharacters(in: .whitespacesAndNewlines)).
    static func preprocess(_ prompt: String, _ rule: String) throws -> String {
        if rule == "none" { return prompt }
        if rule == "lower_strip" { return HfUnicode.string(HfUnicode.pyStrip(pythonLower(HfUnicode.u16(prompt)))) }
        throw TrainError.bundle("generation.text.encoders[].tokenizer.preprocess '\(rule)': expected none or lower_strip")
    }

    /// Python's str.lower(): each code point's full lowercase mapping, and U+03A3 as final sigma (U+03C2) after a cased
    /// letter (case-ignorable characters between) when no cased letter follows (case-ignorable characters between).
    static func pythonLower(_ t: U16) -> U16 {
        let cps = HfUnicode.codePoints(t)
        func cased(_ cp: UInt32) -> Bool { Unicode.Scalar(cp)?.properties.isCased ?? false }
        func ignorable(_ cp: UInt32) -> Bool { Unicode.Scalar(cp)?.properties.isCaseIgnorable ?? false }
        var out: U16 = []
        for (k, cp) in cps.enumerated() {
            if cp == 0x03A3 {
                var j = k - 1
                while j >= 0 && ignorable(cps[j]) { j -= 1 }
                var isFinal = j >= 0 && cased(cps[j])
                if isFinal {
                    j = k + 1
                    while j < cps.count && ignorable(cps[j]) { j += 1 }
                    isFinal = j == cps.count || !cased(cps[j])
                }
                if isFinal { out.append(0x03C2); continue }
            }
            out += HfNormalizers.lowercase(HfUnicode.units(cp))
        }
        return out
    }

    /// (ids before the sequence, ids after it) that a `post_processor` entry adds to a single sequence.
    static func postProcessor(_ spec: [String: Any]?, _ path: String = "post_processor") throws -> ([Int], [Int]) {
        guard let spec = spec else { return ([], []) }
        let kind = spec["type"] as? String ?? ""
        if kind == "Sequence" {
            var before: [Int] = [], after: [Int] = []
            for (i, s) in (spec["processors"] as? [[String: Any]] ?? []).enumerated() {
                let (b, a) = try postProcessor(s, "\(path).processors[\(i)]")
                before = b + before
                after = after + a
            }
            return (before, after)
        }
        if kind == "ByteLevel" { return ([], []) }
        if kind == "RobertaProcessing" || kind == "BertProcessing" {
            guard let cls = spec["cls"] as? [Any], let sep = spec["sep"] as? [Any], cls.count == 2, sep.count == 2,
                  let c = cls[1] as? Int, let s = sep[1] as? Int
            else { throw TrainError.bundle("\(path): cls / sep are not [token, id]") }
            return ([c], [s])
        }
        if kind == "TemplateProcessing" {
            var before: [Int] = [], after: [Int] = []
            var seen = false
            let specials = spec["special_tokens"] as? [String: Any] ?? [:]
            for (j, piece) in (spec["single"] as? [[String: Any]] ?? []).enumerated() {
                if let sequence = piece["Sequence"] as? [String: Any] {
                    guard sequence["id"] as? String == "A" && !seen
                    else { throw TrainError.bundle("\(path).single[\(j)]: only one $A sequence is supported") }
                    seen = true
                } else if let special = piece["SpecialToken"] as? [String: Any], let name = special["id"] as? String {
                    guard let token = specials[name] as? [String: Any], let ids = token["ids"] as? [Int]
                    else { throw TrainError.bundle("\(path).special_tokens: no ids for \(name)") }
                    if seen { after += ids } else { before += ids }
                } else {
                    throw TrainError.bundle("\(path).single[\(j)]: \(piece) is neither Sequence nor SpecialToken")
                }
            }
            guard seen else { throw TrainError.bundle("\(path).single: the template has no $A") }
            return (before, after)
        }
        throw TrainError.bundle("\(path): type '\(kind)' is not supported")
    }
}

/// The `added_tokens` step, first of all: tokens found literally in the text become whole tokens, leftmost-longest:
/// normalized=false ones in the raw text, then normalized=true ones (their normalized form) in the normalized text of
/// what is left; lstrip / rstrip / single_word as `tokenizers` applies them.
final class HfAddedTokens {
    /// content -> id of every entry (the default pad token is looked up here first).
    private(set) var ids: [U16: Int] = [:]
    private var raw: [U16: [String: Any]] = [:]
    private var normed: [U16: [String: Any]] = [:]
    private var rawRegex: NSRegularExpression? = nil
    private var normedRegex: NSRegularExpression? = nil

    init(_ entries: [[String: Any]], _ normalize: HfNormalize) throws {
        var rawOrder: [U16] = [], normedOrder: [U16] = []
        for (i, e) in entries.enumerated() {
            guard let content = e["content"] as? String, let id = e["id"] as? Int
            else { throw TrainError.bundle("added_tokens[\(i)]: no content and id") }
            let c = HfUnicode.u16(content)
            ids[c] = id
            if c.isEmpty { continue }
            let special = e["special"] as? Bool ?? false
            let normalized = e["normalized"] is NSNull ? false : (e["normalized"] as? Bool ?? !special)
            if normalized {
                let key = normalize(c)
                if normed[key] == nil { normedOrder.append(key) }
                normed[key] = e
            } else {
                if raw[c] == nil { rawOrder.append(c) }
                raw[c] = e
            }
        }
        rawRegex = try HfAddedTokens.regex(rawOrder)
        normedRegex = try HfAddedTokens.regex(normedOrder)
    }

    private static func regex(_ table: [U16]) throws -> NSRegularExpression? {
        if table.isEmpty { return nil }
        let longestFirst = table.enumerated().sorted { a, b in
            let (la, lb) = (HfUnicode.codePoints(a.element).count, HfUnicode.codePoints(b.element).count)
            return la != lb ? la > lb : a.offset < b.offset
        }
        let pattern = longestFirst.map { NSRegularExpression.escapedPattern(for: HfUnicode.string($0.element)) }.joined(separator: "|")
        return try NSRegularExpression(pattern: pattern, options: [])
    }

    /// (start, end, token id or nil) covering t, with lstrip / rstrip / single_word applied.
    func split(_ t: U16, raw isRaw: Bool) -> [(Int, Int, Int?)] {
        let regex = isRaw ? rawRegex : normedRegex
        let table = isRaw ? raw : normed
        guard let re = regex, !t.isEmpty else { return [(0, t.count, nil)] }
        var out: [(Int, Int, Int?)] = []
        var done = 0
        for (a, b) in HfUnicode.matches(re, t) {
            var start = a, stop = b
            guard let e = table[Array(t[a..<b])] else { continue }
            if e["single_word"] as? Bool ?? false {
                if (start > 0 && HfUnicode.isWordChar(HfUnicode.codePointBefore(t, start)))
                    || (stop < t.count && HfUnicode.isWordChar(HfUnicode.codePoint(t, stop).cp)) { continue }
            }
            if e["lstrip"] as? Bool ?? false {
                var left = start
                while left > 0 && HfUnicode.isSpace(UInt32(t[left - 1])) { left -= 1 }
                start = max(left, done)
            }
            if e["rstrip"] as? Bool ?? false {
                while stop < t.count && HfUnicode.isSpace(UInt32(t[stop])) { stop += 1 }
            }
            if done < start { out.append((done, start, nil)) }
            out.append((start, stop, e["id"] as? Int))
            done = stop
        }
        if done != t.count { out.append((done, t.count, nil)) }
        return out
    }
}
