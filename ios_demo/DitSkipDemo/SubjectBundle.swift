import CryptoKit
import Foundation

/// Writes an 8-bit RGB image (`rgb` [h, w, 3]) as a PNG file: the app's uses Core Graphics (CGImageDestination).
/// PNG bytes differ between encoders: readers compare decoded pixels.
protocol PngWriter { func write(_ rgb: [UInt8], h: Int, w: Int, to url: URL) throws }

/// The subject bundle around the residual cache (runtime/subject.py `_write_subject_bundle`, bundle.py BundleWriter),
/// stored mode: the Swift twin of SubjectBundle.kt (run on the JVM against Python in tests/test_app_subject_stage.py);
/// not compiled here. Into `.<name>.partial` beside `out`: the model bundle's files (hard-linked, copied where linking
/// fails), subject/photos/NNN.png, subject/schedule.json, subject/text_conditioning.safetensors, subject/cache/
/// (ModelBundle.writeCache, resumable), then the manifest (kept fields, bundle_kind, subject_stage, files, digest
/// line), last; the folder is renamed to `out`. An error removes the working folder; a killed run leaves it.
enum SubjectBundle {
    static let photosDir = "subject/photos"
    static let scheduleFile = "subject/schedule.json"
    static let textFile = "subject/text_conditioning.safetensors"
    static let cacheDir = "subject/cache"
    static let subjectBundleKind = "subject"
    /// subject.py subject_manifest: the model bundle's fields a subject bundle keeps, in this order.
    static let keptFields = ["created_by", "model", "plan", "lora", "optimizer", "model_stage", "lora_file", "schedule",
                             "programs", "generation", "encode_tiling"]

    static func workDir(for out: URL) -> URL { out.deletingLastPathComponent().appendingPathComponent(".\(out.lastPathComponent).partial") }
    static func photoRel(_ i: Int) -> String { "\(photosDir)/\(String(format: "%03d", i)).png" }

    /// photos.py to_uint8: [3, h, w] in [-1, 1] -> [h, w, 3], round((clip(v) + 1) * 127.5) in Float, half to even.
    static func toUint8(_ pixels: [Float], h: Int, w: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 3 * h * w)
        for c in 0..<3 { for y in 0..<h { for x in 0..<w {
            let v = (min(1, max(-1, pixels[(c * h + y) * w + x])) + 1) * Float(127.5)
            out[(y * w + x) * 3 + c] = UInt8(v.rounded(.toNearestOrEven))
        } } }
        return out
    }

    /// The subject stage (stored mode) -> the subject bundle at `out`; its manifest, or nil when stopped after
    /// `stopAfter` new cache entries (the working folder stays).
    @discardableResult
    static func write(model: ModelBundle, photos: [SubjectPhoto], promptIndex: Int, out: URL, png: PngWriter,
                      overwrite: Bool = false, resume: Bool = true, stopAfter: Int? = nil, runner: ForwardRunner? = nil,
                      progress: (Int, Int) -> Void = { _, _ in }) throws -> PyValue? {
        let fm = FileManager.default
        if fm.fileExists(atPath: out.path) && !overwrite { throw TrainError.bundle("\(out.path) already exists: choose another output folder") }
        try model.verifyFiles()                                     // Bundle.open(verify=True): before any work
        let (prompt, promptRel) = try model.prompts()[promptIndex]
        let identity = model.runIdentity(photos, prompt: prompt, mode: BundleContract.storedMode)
        let work = workDir(for: out)
        let journal = work.appendingPathComponent("\(cacheDir)/\(CacheWriter.journalFile)")
        try checkPartial(work, journal: journal, identity: identity, resume: resume)
        try fm.createDirectory(at: work, withIntermediateDirectories: true)
        let t0 = Date()
        var stopped = false
        defer { if !stopped { try? fm.removeItem(at: work) } }     // an error: nothing half-written is left
        var known: [String: PyValue] = [:]
        let files = try model.files()
        for (rel, info) in files { try link(model.root.appendingPathComponent(rel), work, rel, info, &known) }
        for (i, p) in photos.enumerated() {
            try png.write(toUint8(p.pixels, h: p.h, w: p.w), h: p.h, w: p.w, to: try place(work, photoRel(i)))
        }
        let cfg = try model.scheduleConfig()
        let sizes = photos.map { [$0.h, $0.w] }
        let samples = Schedule.make(cfg, sizesHw: sizes)
        let schedule = SubjectStage.scheduleJson(cfg, samples: samples, photoNames: photos.map { $0.name }, sizesHw: sizes)
        try Data(PyJson.dumps(schedule).utf8).write(to: try place(work, scheduleFile))
        try link(model.root.appendingPathComponent(promptRel), work, textFile, files.first(where: { $0.0 == promptRel })?.1, &known)

        var computed = 0
        let tCache = Date()
        guard let index = try model.writeCache(photos, promptIndex: promptIndex, work: work, stopAfter: stopAfter,
                                               runner: runner, progress: { d, n in computed += 1; progress(d, n) })
        else { stopped = true; return nil }
        let cacheSeconds = Date().timeIntervalSince(tCache)
        let stage = PyValue.object([
            ("schedule", .string(scheduleFile)), ("text_conditioning", .string(textFile)),
            ("photos", .list(photos.indices.map { .string(photoRel($0)) })), ("prompt", .string(prompt)),
            ("num_samples", .int(samples.count)), ("clamped_crops", schedule["clamped_samples"] ?? .int(0)),
            ("entry_shapes", .object(try model.entryShapes().map { ($0.0, .list($0.1.map { .int($0) })) })),
            ("cache_codec", .string(try model.codecSpec())), ("cache_mode", .string(BundleContract.storedMode)),
            ("computed_by", .string("device")), ("model_bundle_sha256", .string(model.manifestSha256)),
            ("run_identity", .string(identity)), ("cache", .string(cacheDir)),
            ("cache_rel_error", index["rel_error"] ?? .null), ("cache_entry_bytes", index["entry_bytes"] ?? .null),
            ("resumed_entries", .int(samples.count - computed)), ("computed_entries", .int(computed)),
            ("seconds_per_sample", .double(round(cacheSeconds / Double(max(computed, 1)), 4))),
            ("seconds", .double(round(Date().timeIntervalSince(t0), 3)))])
        var manifest: [(String, PyValue)] = [("format", .string(BundleContract.bundleFormat)),
                                             ("format_version", .int(BundleContract.bundleFormatVersion))]
        for k in keptFields { if let v = model.manifest[k] { manifest.append((k, v)) } }
        manifest.append((BundleContract.bundleKindField, .string(subjectBundleKind)))
        manifest.append(("subject_stage", stage))
        manifest.append(("files", try fileList(work, known)))
        let m = PyValue.object(manifest)
        try manifestBytes(m).write(to: work.appendingPathComponent(BundleContract.manifestFile))
        if fm.fileExists(atPath: out.path) { try fm.removeItem(at: out) }
        try fm.moveItem(at: work, to: out)                          // rename(2) on one volume
        return m
    }

    /// subject.py check_partial: a working folder whose cache journal was written for the same inputs is continued, one
    /// of other inputs refused (and kept), one without a journal (or resume false) removed.
    private static func checkPartial(_ work: URL, journal: URL, identity: String, resume: Bool) throws {
        let fm = FileManager.default
        guard fm.fileExists(atPath: work.path) else { return }
        var run: String?
        if resume, let data = try? Data(contentsOf: journal), let nl = data.firstIndex(of: 0x0A) ?? Optional(data.endIndex),
           let head = try? PyJson.parse(String(decoding: data[data.startIndex..<nl], as: UTF8.self)) {
            run = head[CacheWriter.headerKey]?[CacheWriter.runKey]?.stringValue
        }
        if let r = run, r != identity {
            throw TrainError.bundle("\(work.path): an interrupted subject stage for other inputs (another model bundle, other photos, prompt or mode): delete it or start over without resuming")
        }
        if run == nil { try fm.removeItem(at: work) }
    }

    /// bundle.py manifest_bytes: json.dumps(manifest, indent=1), its first line the SHA-256 of the rest.
    static func manifestBytes(_ manifest: PyValue) -> Data {
        let rest = Data(PyJson.dumps(manifest, indent: 1).utf8).dropFirst(2)
        let digest = CacheWriter.hex(SHA256.hash(data: rest))
        return Data("{\"\(BundleContract.manifestDigestField)\": \"\(digest)\",\n".utf8) + rest
    }

    static func sha256(_ url: URL) throws -> String {
        let h = try FileHandle(forReadingFrom: url)
        defer { try? h.close() }
        var hasher = SHA256()
        while true {
            let chunk = h.readData(ofLength: 1 << 20)
            if chunk.isEmpty { break }
            hasher.update(data: chunk)
        }
        return CacheWriter.hex(hasher.finalize())
    }

    private static func place(_ root: URL, _ rel: String) throws -> URL {
        let u = root.appendingPathComponent(rel)
        try FileManager.default.createDirectory(at: u.deletingLastPathComponent(), withIntermediateDirectories: true)
        return u
    }

    /// BundleWriter.link: a hard link, a copy where linking fails; `info` spares hashing it again on commit.
    private static func link(_ src: URL, _ root: URL, _ rel: String, _ info: PyValue?, _ known: inout [String: PyValue]) throws {
        let dst = try place(root, rel)
        try? FileManager.default.removeItem(at: dst)
        do { try FileManager.default.linkItem(at: src, to: dst) } catch { try FileManager.default.copyItem(at: src, to: dst) }
        if let i = info { known[rel] = .object([("sha256", i["sha256"] ?? .null), ("bytes", i["bytes"] ?? .null)]) }
    }

    /// BundleWriter's commit: every file, sorted component by component as Python sorts paths, with SHA-256 and size.
    private static func fileList(_ root: URL, _ known: [String: PyValue]) throws -> PyValue {
        var rels: [String] = []
        let base = root.standardizedFileURL.path + "/"
        if let e = FileManager.default.enumerator(at: root, includingPropertiesForKeys: [.isRegularFileKey]) {
            for case let u as URL in e where (try? u.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true {
                rels.append(String(u.standardizedFileURL.path.dropFirst(base.count)))
            }
        }
        rels.sort { a, b in
            let pa = a.split(separator: "/").map(String.init), pb = b.split(separator: "/").map(String.init)
            return pa.lexicographicallyPrecedes(pb, by: { $0.unicodeScalars.lexicographicallyPrecedes($1.unicodeScalars, by: { $0.value < $1.value }) })
        }
        var out: [(String, PyValue)] = []
        for rel in rels {
            let u = root.appendingPathComponent(rel)
            let size = (try FileManager.default.attributesOfItem(atPath: u.path)[.size] as? NSNumber)?.intValue ?? -1
            if let k = known[rel], k["bytes"]?.intValue == size { out.append((rel, k)) }
            else { out.append((rel, .object([("sha256", .string(try sha256(u))), ("bytes", .int(size))]))) }
        }
        return .object(out)
    }

    /// Python's round(x, digits) for the timing fields.
    private static func round(_ x: Double, _ digits: Int) -> Double {
        let p = pow(10.0, Double(digits)); return (x * p).rounded(.toNearestOrEven) / p
    }
}
