import CryptoKit
import Foundation

/// One stored part of a cache entry as the index's `layout` gives it (contract `cache.layout_fields`).
struct CachePart { let dtype: String; let shape: [Int]; let offset: Int; let bytes: Int }

/// One sample's place in the shards (contract `cache.entry_fields`).
struct CacheEntry { let shard: String; let offset: Int; let bytes: Int; let sha256: String }

/// The sharded residual cache (contract v2, `cache` section; ditskip_edge/cache/store.py): cache_index.json plus
/// shard_NNNNN.bin. Each shard is memory-mapped (Data .alwaysMapped); sample k is the slice [offset, offset + bytes),
/// its SHA-256 is checked, and its parts are handed out as stored (int8 / uint8 codes and fp16 bytes, float32 scales and x0):
/// the program decodes them itself.
final class ResidualCache {
    let dir: URL
    let layout: [String: CachePart]
    let entryBytes: Int
    private let entries: [CacheEntry]
    private var maps: [String: Data] = [:]

    init(dir: URL) throws {
        self.dir = dir
        let url = dir.appendingPathComponent(BundleContract.cacheIndexFile)
        guard let index = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any]
        else { throw TrainError.bundle("\(url.path): not a JSON object") }
        guard index["format"] as? String == BundleContract.cacheFormat,
              index["format_version"] as? Int == BundleContract.cacheFormatVersion
        else { throw TrainError.bundle("\(url.path): not a \(BundleContract.cacheFormat) v\(BundleContract.cacheFormatVersion) cache (bundle compiled for another contract)") }
        guard let entryBytes = index["entry_bytes"] as? Int, let lj = index["layout"] as? [String: [String: Any]],
              let shards = index["shards"] as? [String: [String: Any]], let ej = index["entries"] as? [[String: Any]]
        else { throw TrainError.bundle("\(url.path): index fields missing") }
        self.entryBytes = entryBytes
        var layout: [String: CachePart] = [:]
        for (name, p) in lj {
            guard let dtype = p["dtype"] as? String, let shape = p["shape"] as? [Int],
                  let offset = p["offset"] as? Int, let bytes = p["bytes"] as? Int,
                  let k = BundleContract.cachePartDtypes.firstIndex(of: dtype),
                  bytes == shape.reduce(1, *) * BundleContract.cachePartDtypeBytes[k], offset >= 0, offset + bytes <= entryBytes
            else { throw TrainError.bundle("\(url.path): layout part \(name) is malformed") }
            layout[name] = CachePart(dtype: dtype, shape: shape, offset: offset, bytes: bytes)
        }
        guard layout[BundleContract.x0Key] != nil else { throw TrainError.bundle("\(url.path): layout has no x0") }
        self.layout = layout
        var shardBytes: [String: Int] = [:]
        for (name, info) in shards {
            let path = dir.appendingPathComponent(name).path
            let size = (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int
            guard let want = info["bytes"] as? Int, size == want
            else { throw TrainError.bundle("\(path): missing or not the size \(BundleContract.cacheIndexFile) gives") }
            shardBytes[name] = want
        }
        entries = try ej.enumerated().map { i, e in
            guard let shard = e["shard"] as? String, let offset = e["offset"] as? Int, let bytes = e["bytes"] as? Int,
                  let sha = e["sha256"] as? String, bytes == entryBytes, let size = shardBytes[shard], offset + bytes <= size
            else { throw TrainError.bundle("\(url.path): entry \(i) lies outside its shard") }
            return CacheEntry(shard: shard, offset: offset, bytes: bytes, sha256: sha)
        }
    }

    var count: Int { entries.count }

    /// Sample k's stored parts {"x0", "<residual>.<part>", ...}: its shard slice, SHA-256 checked.
    func read(_ k: Int) throws -> [String: RawTensor] {
        let e = entries[k]
        if maps[e.shard] == nil {
            maps[e.shard] = try Data(contentsOf: dir.appendingPathComponent(e.shard), options: .alwaysMapped)
        }
        let slice = maps[e.shard]!.subdata(in: e.offset..<(e.offset + e.bytes))      // this sample's bytes only
        let hex = SHA256.hash(data: slice).map { String(format: "%02x", $0) }.joined()
        guard hex == e.sha256
        else { throw TrainError.bundle("\(e.shard): entry \(k) (bytes \(e.offset)..\(e.offset + e.bytes)) does not match its SHA-256 (corrupt)") }
        return layout.mapValues { p in
            RawTensor(dtype: ResidualCache.safetensorsDtype[p.dtype]!, shape: p.shape,
                      bytes: slice.subdata(in: p.offset..<(p.offset + p.bytes)))
        }
    }

    /// Contract part dtype -> RawTensor's (safetensors) dtype code.
    static let safetensorsDtype = ["float32": "F32", "int8": "I8", "uint8": "U8"]
}
