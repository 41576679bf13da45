import Foundation

/// BERT-uncased WordPiece (flux-testbed's MiniLM), the Swift twin of ditskip_edge/runtime/wordpiece.py: clean text,
/// space out CJK ideographs, lower-case, strip accents (NFD, drop non-spacing marks), split on whitespace and
/// punctuation, greedy longest-match pieces ("##" continuations; [UNK] for no match or > 100 characters), then
/// [CLS] pieces [SEP] padded with [PAD]. Works on Unicode scalars (Python's code points).
struct Wordpiece {
    let vocab: [String: Int]
    let maxLen: Int
    static let maxWordChars = 100
    static let cjk: [ClosedRange<UInt32>] = [0x4E00...0x9FFF, 0x3400...0x4DBF, 0x20000...0x2A6DF, 0x2A700...0x2B73F,
                                              0x2B740...0x2B81F, 0x2B820...0x2CEAF, 0xF900...0xFAFF, 0x2F800...0x2FA1F]

    init(vocabFile: URL, maxLen: Int) throws {
        let text = try String(contentsOf: vocabFile, encoding: .utf8)
        var v: [String: Int] = [:]
        for (i, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() { v[String(line)] = i }
        vocab = v
        self.maxLen = maxLen
    }

    static func isPunct(_ s: Unicode.Scalar) -> Bool {
        let cp = s.value
        if (33...47).contains(cp) || (58...64).contains(cp) || (91...96).contains(cp) || (123...126).contains(cp) { return true }
        switch s.properties.generalCategory {
        case .connectorPunctuation, .dashPunctuation, .openPunctuation, .closePunctuation, .initialPunctuation,
             .finalPunctuation, .otherPunctuation: return true
        default: return false
        }
    }

    static func isControlLike(_ s: Unicode.Scalar) -> Bool {
        switch s.properties.generalCategory {
        case .control, .format, .privateUse, .surrogate, .unassigned: return true
        default: return false
        }
    }

    /// BertNormalizer + BertPreTokenizer: the words WordPiece splits.
    static func basicWords(_ text: String) -> [String] {
        var cleaned = String.UnicodeScalarView()
        for s in text.unicodeScalars {
            let ws = s == " " || s == "\t" || s == "\n" || s == "\r" || s.properties.generalCategory == .spaceSeparator
            if s.value == 0 || s.value == 0xFFFD { continue }
            if ws { cleaned.append(" "); continue }
            if isControlLike(s) { continue }
            if cjk.contains(where: { $0.contains(s.value) }) { cleaned.append(" "); cleaned.append(s); cleaned.append(" "); continue }
            cleaned.append(s)
        }
        let nfd = String(cleaned).lowercased().decomposedStringWithCanonicalMapping
        var words: [String] = []
        for w in nfd.unicodeScalars.filter({ $0.properties.generalCategory != .nonspacingMark })
            .split(separator: " ", omittingEmptySubsequences: true) {
            var cur = String.UnicodeScalarView()
            for s in w {
                if isPunct(s) {
                    if !cur.isEmpty { words.append(String(cur)); cur = String.UnicodeScalarView() }
                    words.append(String(s))
                } else { cur.append(s) }
            }
            if !cur.isEmpty { words.append(String(cur)) }
        }
        return words
    }

    func pieces(_ word: String) -> [Int] {
        let scalars = Array(word.unicodeScalars)
        let unk = vocab["[UNK]"]!
        if scalars.count > Wordpiece.maxWordChars { return [unk] }
        var ids: [Int] = []
        var start = 0
        while start < scalars.count {
            var end = scalars.count
            var found: Int? = nil
            while start < end {
                var piece = start > 0 ? "##" : ""
                piece.unicodeScalars.append(contentsOf: scalars[start..<end])
                if let id = vocab[piece] { found = id; break }
                end -= 1
            }
            guard let id = found else { return [unk] }
            ids.append(id)
            start = end
        }
        return ids
    }

    func tokenIds(_ text: String) -> [Int] { Wordpiece.basicWords(text).flatMap { pieces($0) } }

    /// Tokens the encoder reads, [CLS] and [SEP] included: generation refuses a prompt above maxLen.
    func countTokens(_ text: String) -> Int { tokenIds(text).count + 2 }

    /// (input_ids, attention_mask), each maxLen long.
    func encode(_ text: String) -> (ids: [Int64], mask: [Int64]) {
        let ids = [vocab["[CLS]"]!] + tokenIds(text).prefix(maxLen - 2) + [vocab["[SEP]"]!]
        let pad = Int64(vocab["[PAD]"]!)
        return ((0..<maxLen).map { $0 < ids.count ? Int64(ids[$0]) : pad }, (0..<maxLen).map { $0 < ids.count ? 1 : 0 })
    }
}
