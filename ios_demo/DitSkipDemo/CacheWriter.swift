import CryptoKit
import Foundation

/// One part's place inside an entry (the index's `layout`).
struct LayoutPart { let dtype: String; let shape: [Int]; let offset: Int; let bytes: Int }

/// The device's residual cache writer: the twin of ditskip_edge/runtime/cache.py CacheWriter and of CacheWriter.kt
/// (which tests/test_app_subject_stage.py checks byte for byte against Python on the JVM; this file mirrors it line for
/// line and is not compiled here). Entries are appended to shard_NNNNN.bin (.tmp until closed at about shardBytes);
/// `finish` writes cache_index.json (temp file + fsync + rename). Resumable: every entry is fsync'ed and journalled
/// (cache_journal.jsonl); a writer opened on a folder holding a journal with the same header continues it, the open
/// shard cut back to its last journalled entry, a torn last journal line cut off.
final class CacheWriter {
    static let defaultShardBytes = 64 << 20
    static let journalFile = "cache_journal.jsonl"
    static let align = 64
    // journal record keys (runtime/cache.py)
    static let headerKey = "header", entryKey = "entry", extraKey = "extra", shardKey = "shard", runKey = "run"
    static let bytesKey = "bytes", shaKey = "sha256", offsetKey = "offset"

    let dir: URL
    let identity: PyValue
    let codec: CacheCodec
    let shapes: [(String, [Int])]
    let shardBytes: Int
    let run: String
    private(set) var layout: [(String, LayoutPart)] = []
    let entrySize: Int
    private(set) var entries: [PyValue] = []
    private(set) var extras: [PyValue] = []
    private var shards: [(String, PyValue)] = []
    private(set) var resumedEntries = 0
    private var file: FileHandle?
    private var name = ""
    private var hash = SHA256()
    private var pos = 0
    private var journal: FileHandle?

    init(dir: URL, identity: PyValue, codec: CacheCodec, shapes: [(String, [Int])],
         shardBytes: Int = CacheWriter.defaultShardBytes, resumable: Bool = false, run: String = "") throws {
        self.dir = dir; self.identity = identity; self.codec = codec; self.shapes = shapes
        self.shardBytes = shardBytes; self.run = run
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var off = 0
        var layout: [(String, LayoutPart)] = []
        for (part, dtype, shape) in try codec.parts(shapes) {
            guard let k = BundleContract.cachePartDtypes.firstIndex(of: dtype)
            else { throw TrainError.bundle("cache part dtype \(dtype) is not one of \(BundleContract.cachePartDtypes)") }
            let n = BundleContract.cachePartDtypeBytes[k] * shape.reduce(1, *)
            layout.append((part, LayoutPart(dtype: dtype, shape: shape, offset: off, bytes: n)))
            off = (off + n + CacheWriter.align - 1) / CacheWriter.align * CacheWriter.align
        }
        self.layout = layout
        entrySize = off
        if resumable { try resumeOrStart() }
    }

    var nextIndex: Int { entries.count }
    var shardNames: [String] { shards.map { $0.0 } }

    private func shapesJson() -> PyValue { .object(shapes.map { ($0.0, .list($0.1.map { .int($0) })) }) }

    private func header() -> PyValue {
        .object([("identity_sha256", .string(CacheWriter.identityDigest(identity))), ("codec", .string(codec.spec)),
                 ("shapes", shapesJson()), ("shard_bytes", .int(shardBytes)), ("run", .string(run))])
    }

    private func journalAppend(_ record: PyValue) throws {
        guard let j = journal else { return }
        try j.write(contentsOf: Data((PyJson.dumps(record, compact: true) + "\n").utf8))
        try j.synchronize()
    }

    private func url(_ n: String) -> URL { dir.appendingPathComponent(n) }

    private func shardFiles() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).filter { $0.hasPrefix("shard_") }
    }

    private func resumeOrStart() throws {
        let path = url(CacheWriter.journalFile)
        var lines: [PyValue] = []
        var goodBytes = 0
        if let text = try? String(contentsOf: path, encoding: .utf8) {
            for raw in text.components(separatedBy: "\n") {
                guard let rec = try? PyJson.parse(raw), rec.pairs != nil else { break }
                lines.append(rec)
                goodBytes += raw.utf8.count + 1
            }
        }
        if lines.isEmpty {
            for stale in shardFiles() { try? FileManager.default.removeItem(at: url(stale)) }
            FileManager.default.createFile(atPath: path.path, contents: nil)
            journal = try FileHandle(forWritingTo: path)
            try journalAppend(.object([(CacheWriter.headerKey, header())]))
            return
        }
        guard lines[0][CacheWriter.headerKey] == header()
        else { throw TrainError.bundle("\(path.path): an interrupted residual cache for other inputs (model bundle, photos, prompt, codec or schedule differ): delete it or start over") }
        for rec in lines.dropFirst() {
            if let e = rec[CacheWriter.entryKey] {
                entries.append(e)
                extras.append(rec[CacheWriter.extraKey] ?? .object([]))
            } else if let s = rec[CacheWriter.shardKey]?.stringValue {
                shards.append((s, .object([(CacheWriter.bytesKey, rec[CacheWriter.bytesKey] ?? .null),
                                           (CacheWriter.shaKey, rec[CacheWriter.shaKey] ?? .null)])))
            }
        }
        // the shard still open when the run stopped: cut it back to its last journalled entry and reopen it
        let closed = Set(shardNames)
        let openEntries = entries.filter { !closed.contains($0[CacheWriter.shardKey]?.stringValue ?? "") }
        if let first = openEntries.first, let last = openEntries.last {
            name = first[CacheWriter.shardKey]!.stringValue!
            let tmp = url(name + ".tmp"), fin = url(name)
            let fm = FileManager.default
            if !fm.fileExists(atPath: tmp.path) && fm.fileExists(atPath: fin.path) { try fm.moveItem(at: fin, to: tmp) }
            let end = last[CacheWriter.offsetKey]!.intValue! + last[CacheWriter.bytesKey]!.intValue!
            let size = (try? fm.attributesOfItem(atPath: tmp.path))?[.size] as? Int ?? -1
            guard size >= end
            else { throw TrainError.bundle("\(tmp.path): shorter than its journal says (\(end) bytes): the cache in progress is damaged; delete it or start over") }
            let f = try FileHandle(forUpdating: tmp)
            try f.truncate(atOffset: UInt64(end))
            try f.seek(toOffset: 0)
            hash = SHA256()
            var done = 0
            while done < end {
                let block = try f.read(upToCount: min(1 << 20, end - done)) ?? Data()
                if block.isEmpty { break }
                hash.update(data: block)
                done += block.count
            }
            try f.seek(toOffset: UInt64(end))
            pos = end
            file = f
        }
        for stale in shardFiles() {                                   // shards begun after the last journalled entry
            let n = stale.hasSuffix(".tmp") ? String(stale.dropLast(4)) : stale
            if !closed.contains(n) && n != (openEntries.isEmpty ? "" : name) { try? FileManager.default.removeItem(at: url(stale)) }
        }
        resumedEntries = entries.count
        let j = try FileHandle(forWritingTo: path)
        let length = try Int(j.seekToEnd())
        try j.truncate(atOffset: UInt64(min(goodBytes, length)))    // a torn last line goes
        try j.seekToEnd()
        if goodBytes > length { try j.write(contentsOf: Data("\n".utf8)) }   // the last good line lost only its newline
        journal = j
    }

    /// Append entry `index` (exactly the layout's parts, dtypes and shapes).
    func add(_ index: Int, _ parts: [String: EncodedPart], extra: PyValue = .object([])) throws {
        guard index == entries.count
        else { throw TrainError.bundle("cache entries must be added in order: got \(index), expected \(entries.count)") }
        guard Set(parts.keys) == Set(layout.map { $0.0 })
        else { throw TrainError.bundle("cache entry \(index): parts \(parts.keys.sorted()) differ from the layout") }
        var buf = Data(count: entrySize)
        for (p, info) in layout {
            let part = parts[p]!
            guard part.dtype == info.dtype, part.shape == info.shape, part.bytes.count == info.bytes
            else { throw TrainError.bundle("cache entry \(index): part \(p) is \(part.dtype) \(part.shape), layout \(info.dtype) \(info.shape)") }
            buf.replaceSubrange(info.offset..<(info.offset + info.bytes), with: part.bytes)
        }
        if file == nil || (pos + entrySize > shardBytes && pos > 0) {
            try closeShard()
            try openShard()
        }
        try file!.write(contentsOf: buf)
        hash.update(data: buf)
        let entry = PyValue.object([(CacheWriter.shardKey, .string(name)), (CacheWriter.offsetKey, .int(pos)),
                                    (CacheWriter.bytesKey, .int(entrySize)),
                                    (CacheWriter.shaKey, .string(CacheWriter.hex(SHA256.hash(data: buf))))])
        entries.append(entry)
        extras.append(extra)
        pos += entrySize
        if journal != nil {
            try file!.synchronize()
            try journalAppend(.object([(CacheWriter.entryKey, entry), (CacheWriter.extraKey, extra)]))
        }
    }

    private func openShard() throws {
        name = String(format: "shard_%05d.bin", shards.count)
        let tmp = url(name + ".tmp")
        FileManager.default.createFile(atPath: tmp.path, contents: nil)          // truncates an existing one
        file = try FileHandle(forWritingTo: tmp)
        hash = SHA256()
        pos = 0
    }

    private func closeShard() throws {
        guard let f = file else { return }
        try f.synchronize()
        try f.close()
        guard rename(url(name + ".tmp").path, url(name).path) == 0        // atomic, replaces (os.replace)
        else { throw TrainError.runtime("\(url(name).path): rename failed (errno \(errno))") }
        let info = PyValue.object([(CacheWriter.bytesKey, .int(pos)), (CacheWriter.shaKey, .string(CacheWriter.hex(hash.finalize())))])
        shards.append((name, info))
        file = nil
        try journalAppend(.object([(CacheWriter.shardKey, .string(name))] + info.pairs!))
    }

    /// Close the last shard and write the index (with `extra` fields, e.g. the coding error); the journal goes.
    @discardableResult
    func finish(extra: [(String, PyValue)] = []) throws -> PyValue {
        try closeShard()
        let layoutJson = PyValue.object(layout.map { p, l -> (String, PyValue) in
            (p, .object([("dtype", .string(l.dtype)), ("shape", .list(l.shape.map { .int($0) })), ("offset", .int(l.offset)),
                         ("bytes", .int(l.bytes))]))
        })
        var index: [(String, PyValue)] = [("format", .string(BundleContract.cacheFormat)),
            ("format_version", .int(BundleContract.cacheFormatVersion)), ("identity", identity),
            ("identity_sha256", .string(CacheWriter.identityDigest(identity))), ("codec", .object([("spec", .string(codec.spec))])),
            ("shapes", shapesJson())]
        index += extra
        index += [("layout", layoutJson), ("entry_bytes", .int(entrySize)), ("num_entries", .int(entries.count)),
                  ("shards", .object(shards)), ("entries", .list(entries))]
        let value = PyValue.object(index)
        try CacheWriter.atomicWriteText(url(BundleContract.cacheIndexFile), PyJson.dumps(value, indent: 1))
        try journal?.close()
        journal = nil
        try? FileManager.default.removeItem(at: url(CacheWriter.journalFile))
        return value
    }

    /// Stop without finishing (a resumable writer's journal and open shard stay).
    func close() {
        try? file?.close(); try? journal?.close()
        file = nil; journal = nil
    }

    /// SHA-256 of json.dumps(identity, sort_keys=True) (cache_format.py identity_digest).
    static func identityDigest(_ identity: PyValue) -> String {
        hex(SHA256.hash(data: Data(PyJson.dumps(identity, sortKeys: true).utf8)))
    }

    static func hex<D: Sequence>(_ d: D) -> String where D.Element == UInt8 { d.map { String(format: "%02x", $0) }.joined() }

    static func atomicWriteText(_ path: URL, _ text: String) throws {
        let tmp = path.deletingLastPathComponent().appendingPathComponent(path.lastPathComponent + ".tmp")
        FileManager.default.createFile(atPath: tmp.path, contents: nil)
        let h = try FileHandle(forWritingTo: tmp)
        try h.write(contentsOf: Data(text.utf8))
        try h.synchronize()
        try h.close()
        guard rename(tmp.path, path.path) == 0 else { throw TrainError.runtime("\(path.path): rename failed (errno \(errno))") }
    }
}
