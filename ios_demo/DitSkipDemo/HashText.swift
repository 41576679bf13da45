import CryptoKit
import Foundation

/// The built-in tiny models' hash text encoder, the Swift twin of ditskip_edge/runtime/hash_text.py: each lower-cased
/// [a-z0-9]+ word seeds PortableRng with the first 8 bytes of its SHA-256 (little-endian, top bit cleared), plus fixed
/// positional vectors; pooled (FLUX) = mean of the words' vectors, txt_mask (SANA) = 1 on words. Not a network.
enum HashText {
    static let positionSeed: UInt64 = 1234
    static let positionScale: Float = 0.1

    static func words(_ prompt: String) -> [String] {
        var out: [String] = [], cur = ""
        for s in prompt.lowercased().unicodeScalars {
            if ("a"..."z").contains(s) || ("0"..."9").contains(s) { cur.unicodeScalars.append(s) }
            else if !cur.isEmpty { out.append(cur); cur = "" }
        }
        if !cur.isEmpty { out.append(cur) }
        return out
    }

    static func wordSeed(_ word: String) -> UInt64 {
        let d = Array(SHA256.hash(data: Data(word.utf8)))
        var v: UInt64 = 0
        for i in (0..<8).reversed() { v = (v << 8) | UInt64(d[i]) }
        return v & 0x7FFF_FFFF_FFFF_FFFF
    }

    /// cond.<key> -> (shape, values) for one prompt, batch 1.
    static func encode(_ prompt: String, arch: String, seqLen: Int, dim: Int, pooledDim: Int) -> [String: ([Int], [Float])] {
        let ws = Array(words(prompt).prefix(seqLen))
        let pos = PortableRng.normal(seed: positionSeed, count: seqLen * dim)
        var txt = [Float](repeating: 0, count: seqLen * dim), mask = [Float](repeating: 0, count: seqLen)
        for (i, w) in ws.enumerated() {
            let v = PortableRng.normal(seed: wordSeed(w), count: dim)
            for j in 0..<dim { txt[i * dim + j] = v[j] + pos[i * dim + j] * positionScale }
            mask[i] = 1
        }
        var out: [String: ([Int], [Float])] = ["cond.txt": ([1, seqLen, dim], txt)]
        if arch == "flux" {
            var pooled = [Float](repeating: 0, count: pooledDim)
            for w in ws { let v = PortableRng.normal(seed: wordSeed(w), count: pooledDim); for j in 0..<pooledDim { pooled[j] += v[j] } }
            if !ws.isEmpty { for j in 0..<pooledDim { pooled[j] /= Float(ws.count) } }
            out["cond.pooled"] = ([1, pooledDim], pooled)
        } else {
            out["cond.txt_mask"] = ([1, seqLen], mask)
        }
        return out
    }
}
