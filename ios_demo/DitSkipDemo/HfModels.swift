import Foundation

/// The `model` step (HfModels.kt, ditskip_edge/runtime/tokenizer/models.py): a tokenizer.json `model` entry ->
/// tokenize(word) = the word's ids.
///
///   BPE        merges applied lowest rank first, leftmost on ties; continuing_subword_prefix, end_of_word_suffix, unk
///              with fuse_unk, byte_fallback to "<0xNN>", ignore_merges (dropout other than 0 is refused)
///   Unigram    Viterbi over piece scores, ties to the earlier and shorter piece; an uncovered character is unk with
///              score min - 10; consecutive unks fused; byte_fallback
///   WordLevel  the word's id, else unk
///
/// Characters are code points; vocabularies are keyed by UTF-16 units (U16), never by String (canonical equivalence
/// would merge distinct pieces), and read from the JSON as NSDictionary (bridging to [String: Int] would trap on two
/// canonically equivalent keys). Each model caches the ids of up to cacheMaxWords words; any other type is refused.
protocol HfModel: AnyObject {
    var vocab: [U16: Int] { get }
    func tokenize(_ word: U16) throws -> [Int]
}

enum HfModels {
    static let cacheMaxWords = 10_000
    static let unigramUnkPenalty = 10.0          // unk score = lowest piece score - this (as SentencePiece)

    static func build(_ spec: [String: Any], _ path: String = "model") throws -> HfModel {
        var kind = spec["type"] as? String
        if kind == nil && spec["merges"] != nil { kind = "BPE" }           // very old files leave out the BPE type
        if kind == "BPE" { return try HfBpe(spec, path) }
        if kind == "Unigram" { return try HfUnigram(spec, path) }
        if kind == "WordLevel" { return try HfWordLevel(spec, path) }
        throw TrainError.bundle("\(path): type '\(kind ?? "none")' is not supported")
    }

    /// A JSON object of piece -> id (BPE, WordLevel `vocab`), read key by key.
    static func vocabulary(_ object: Any?, _ path: String) throws -> [U16: Int] {
        guard let dict = object as? NSDictionary else { throw TrainError.bundle("\(path).vocab: expected an object") }
        var out: [U16: Int] = [:]
        for (k, v) in dict {
            guard let key = k as? String, let id = v as? Int else { throw TrainError.bundle("\(path).vocab: \(k) is not a piece -> id") }
            out[HfUnicode.u16(key)] = id
        }
        return out
    }

    /// "<0xNN>" for each UTF-8 byte of t (byte_fallback pieces).
    static func byteTokens(_ t: U16) -> [U16] {
        HfUnicode.string(t).utf8.map { b in
            let h = String(b, radix: 16, uppercase: true)
            return HfUnicode.u16("<0x" + (h.count < 2 ? "0" + h : h) + ">")
        }
    }
}

/// The per-model word cache, cleared when full.
final class HfWordCache {
    private var words: [U16: [Int]] = [:]

    func get(_ word: U16, _ compute: (U16) throws -> [Int]) rethrows -> [Int] {
        if let ids = words[word] { return ids }
        if words.count >= HfModels.cacheMaxWords { words.removeAll() }
        let ids = try compute(word)
        words[word] = ids
        return ids
    }
}

/// A min-heap of (rank, position, merged id): BPE's merge queue (Python's heapq order).
struct HfMergeHeap {
    private var items: [(Int, Int, Int)] = []
    var isEmpty: Bool { items.isEmpty }

    mutating func push(_ x: (Int, Int, Int)) {
        items.append(x)
        var i = items.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            if items[i] < items[parent] { items.swapAt(i, parent); i = parent } else { break }
        }
    }

    mutating func pop() -> (Int, Int, Int) {
        let top = items[0]
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var i = 0
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < items.count && items[l] < items[m] { m = l }
                if r < items.count && items[r] < items[m] { m = r }
                if m == i { break }
                items.swapAt(i, m)
                i = m
            }
        }
        return top
    }
}

final class HfBpe: HfModel {
    let vocab: [U16: Int]
    private let unk: U16?, prefix: U16?, suffix: U16?
    private let fuseUnk: Bool, byteFallback: Bool, ignoreMerges: Bool
    private let merges: [Int64: (rank: Int, merged: Int)]     // (left id, right id) packed -> (rank, merged id)
    private let cache = HfWordCache()

    init(_ spec: [String: Any], _ path: String) throws {
        if let dropout = spec["dropout"] as? Double, dropout != 0 {
            throw TrainError.bundle("\(path): BPE dropout \(dropout) is not supported (sampling, not a function)")
        }
        let vocab = try HfModels.vocabulary(spec["vocab"], path)
        let prefix = (spec["continuing_subword_prefix"] as? String).map(HfUnicode.u16)
        unk = (spec["unk_token"] as? String).map(HfUnicode.u16)
        suffix = (spec["end_of_word_suffix"] as? String).map(HfUnicode.u16)
        fuseUnk = spec["fuse_unk"] as? Bool ?? false
        byteFallback = spec["byte_fallback"] as? Bool ?? false
        ignoreMerges = spec["ignore_merges"] as? Bool ?? false
        let cut = HfUnicode.codePoints(prefix ?? []).count
        var merges: [Int64: (rank: Int, merged: Int)] = [:]
        for (rank, m) in (spec["merges"] as? [Any] ?? []).enumerated() {
            var pair: [String] = []
            if let s = m as? String { pair = s.components(separatedBy: " ") } else if let a = m as? [String] { pair = a }
            guard pair.count == 2 else { throw TrainError.bundle("\(path).merges[\(rank)]: '\(m)' is not two symbols") }
            let left = HfUnicode.u16(pair[0]), right = HfUnicode.u16(pair[1])
            let rightCps = HfUnicode.codePoints(right)
            let rest = HfUnicode.units(rightCps[min(cut, rightCps.count)...])
            var ids: [Int] = []
            for piece in [left, right, left + rest] {
                guard let id = vocab[piece]
                else { throw TrainError.bundle("\(path).merges[\(rank)]: '\(HfUnicode.string(piece))' is not in the vocabulary") }
                ids.append(id)
            }
            merges[HfBpe.key(ids[0], ids[1])] = (rank, ids[2])
        }
        self.vocab = vocab
        self.prefix = prefix
        self.merges = merges
    }

    private static func key(_ a: Int, _ b: Int) -> Int64 { (Int64(a) << 32) | (Int64(b) & 0xFFFF_FFFF) }

    /// One id per code point (prefix / suffix added), byte-fallback ids, or unk (fused when fuse_unk).
    private func symbols(_ word: U16) throws -> [Int] {
        var ids: [Int] = []
        var unkPending = false
        let cps = HfUnicode.codePoints(word)
        for (i, cp) in cps.enumerated() {
            var s = HfUnicode.units(cp)
            if i > 0, let p = prefix { s = p + s }
            if i == cps.count - 1, let x = suffix { s += x }
            if let id = vocab[s] {
                if unkPending, let u = unk, let uid = vocab[u] { ids.append(uid); unkPending = false }
                ids.append(id)
                continue
            }
            if byteFallback {
                let fallback = HfModels.byteTokens(s).map { vocab[$0] }
                if !fallback.contains(where: { $0 == nil }) { ids += fallback.map { $0! }; continue }   // a pending unk stays pending
            }
            if let u = unk {
                guard let uid = vocab[u]
                else { throw TrainError.bundle("model: unk_token '\(HfUnicode.string(u))' is not in the vocabulary") }
                if unkPending && !fuseUnk { ids.append(uid) }
                unkPending = true
            }
        }
        if unkPending, let u = unk, let uid = vocab[u] { ids.append(uid) }
        return ids
    }

    /// Word::merge_all: a heap of (rank, position, merged id) over a linked list of symbols, so the lowest rank merges
    /// first and the leftmost on ties; an entry whose pair has changed since is skipped.
    private func merge(_ word: U16) throws -> [Int] {
        var ids = try symbols(word)
        let n = ids.count
        var nxt = Array(1...max(n, 1)), prv = Array(-1..<max(n - 1, 0)), alive = [Bool](repeating: true, count: n)
        var heap = HfMergeHeap()
        func push(_ a: Int, _ b: Int) {
            if let m = merges[HfBpe.key(ids[a], ids[b])] { heap.push((m.rank, a, m.merged)) }
        }
        if n > 1 { for i in 0..<(n - 1) { push(i, i + 1) } }
        while !heap.isEmpty {
            let (_, i, merged) = heap.pop()
            let j = nxt[i]
            if !alive[i] || j >= n { continue }
            guard let m = merges[HfBpe.key(ids[i], ids[j])], m.merged == merged else { continue }
            ids[i] = merged
            alive[j] = false
            nxt[i] = nxt[j]
            if nxt[i] < n { prv[nxt[i]] = i }
            if prv[i] >= 0 { push(prv[i], i) }
            if nxt[i] < n { push(i, nxt[i]) }
        }
        return (0..<n).filter { alive[$0] }.map { ids[$0] }
    }

    func tokenize(_ word: U16) throws -> [Int] {
        if word.isEmpty { return [] }
        if ignoreMerges, let id = vocab[word] { return [id] }
        return try cache.get(word) { try merge($0) }
    }
}

final class HfUnigram: HfModel {
    let vocab: [U16: Int]                            // a repeated piece: the last id
    private let scores: [Double]
    private let unkId: Int?
    private let byteFallback: Bool
    private let unkScore: Double
    private let maxPieceChars: Int
    private let cache = HfWordCache()

    init(_ spec: [String: Any], _ path: String) throws {
        guard let pieces = spec["vocab"] as? [[Any]] else { throw TrainError.bundle("\(path).vocab: expected [piece, score] pairs") }
        var vocab: [U16: Int] = [:]
        var scores: [Double] = []
        var longest = 0
        for (i, p) in pieces.enumerated() {
            guard p.count == 2, let piece = p[0] as? String, let score = (p[1] as? NSNumber)?.doubleValue
            else { throw TrainError.bundle("\(path).vocab[\(i)]: expected [piece, score]") }
            let units = HfUnicode.u16(piece)
            vocab[units] = i
            scores.append(score)
            longest = max(longest, HfUnicode.codePoints(units).count)
        }
        let unkId = spec["unk_id"] as? Int
        if let u = unkId, !(0..<pieces.count).contains(u) {
            throw TrainError.bundle("\(path): unk_id \(u) is outside the vocabulary of \(pieces.count)")
        }
        self.vocab = vocab
        self.scores = scores
        self.unkId = unkId
        byteFallback = spec["byte_fallback"] as? Bool ?? false
        unkScore = (scores.min() ?? 0) - HfModels.unigramUnkPenalty
        maxPieceChars = longest
    }

    /// Best segmentation (highest total score); ties keep the first candidate seen (earlier start, then shorter
    /// piece); code points no piece covers are unk; runs of unk come back fused.
    private func viterbi(_ cps: [UInt32]) throws -> [U16] {
        let n = cps.count
        var has = [Bool](repeating: false, count: n + 1), score = [Double](repeating: 0, count: n + 1)
        var from = [Int](repeating: 0, count: n + 1), id = [Int](repeating: -1, count: n + 1)
        has[0] = true
        for start in 0..<n {
            let base = score[start]
            var single = false
            for end in (start + 1)...min(n, start + max(maxPieceChars, 1)) {
                guard let pid = vocab[HfUnicode.units(cps[start..<end])] else { continue }
                let cand = base + scores[pid]
                if !has[end] || cand > score[end] { has[end] = true; score[end] = cand; from[end] = start; id[end] = pid }
                single = single || end == start + 1
            }
            if !single {
                guard let u = unkId else {
                    throw TrainError.bundle("model: no piece covers '\(HfUnicode.string(HfUnicode.units(cps[start])))' and the Unigram has no unk_id")
                }
                let cand = base + unkScore
                if !has[start + 1] || cand > score[start + 1] {
                    has[start + 1] = true; score[start + 1] = cand; from[start + 1] = start; id[start + 1] = u
                }
            }
        }
        var pieces: [U16] = []
        var unkRun: U16 = []                                   // the unk run, read backwards
        var end = n
        while end > 0 {
            let start = from[end]
            let piece = HfUnicode.units(cps[start..<end])
            if id[end] == unkId {
                unkRun = piece + unkRun
            } else {
                if !unkRun.isEmpty { pieces.append(unkRun); unkRun = [] }
                pieces.append(piece)
            }
            end = start
        }
        if !unkRun.isEmpty { pieces.append(unkRun) }
        return pieces.reversed()
    }

    private func ids(_ word: U16) throws -> [Int] {
        var out: [Int] = []
        for piece in try viterbi(HfUnicode.codePoints(word)) {
            let pid = vocab[piece]
            if pid == nil && byteFallback {
                let fallback = HfModels.byteTokens(piece).map { vocab[$0] }
                if !fallback.contains(where: { $0 == nil }) { out += fallback.map { $0! }; continue }
            }
            guard let id = pid ?? unkId else { throw TrainError.bundle("model: piece '\(HfUnicode.string(piece))' has no id and no unk_id") }
            out.append(id)
        }
        return out
    }

    func tokenize(_ word: U16) throws -> [Int] {
        if word.isEmpty { return [] }
        return try cache.get(word) { try ids($0) }
    }
}

final class HfWordLevel: HfModel {
    let vocab: [U16: Int]
    private let unk: U16?

    init(_ spec: [String: Any], _ path: String) throws {
        vocab = try HfModels.vocabulary(spec["vocab"], path)
        unk = (spec["unk_token"] as? String).map(HfUnicode.u16)
    }

    func tokenize(_ word: U16) throws -> [Int] {
        if let id = vocab[word] { return [id] }
        if let u = unk, let id = vocab[u] { return [id] }
        throw TrainError.bundle("model: '\(HfUnicode.string(word))' is not in the WordLevel vocabulary and unk_token is missing")
    }
}
