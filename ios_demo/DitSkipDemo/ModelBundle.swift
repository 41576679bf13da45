import CryptoKit
import Foundation

/// A photo as the subject stage takes it: file name, SHA-256 of the file's bytes, pixels normalised to the data
/// resolution ([3, h, w] in [-1, 1]).
struct SubjectPhoto { let name: String; let sha256: String; let h: Int; let w: Int; let pixels: [Float] }

/// A model bundle as the subject stage reads it: the Swift twin of ModelBundle.kt (which runs on the JVM against
/// runtime/subject.py in tests/test_app_subject_stage.py); not compiled here. The manifest is verified against its
/// own digest and parsed with PyJson (ordered keys, Python's numbers); `writeCache` computes the residual cache of the
/// user's photos into `<work>/subject/cache`, resumable. The subject bundle around it: SubjectBundle.swift. Not yet:
/// x0-only / cache-free.
final class ModelBundle {
    let root: URL
    let manifestSha256: String
    let manifest: PyValue
    private let manifestObject: [String: Any]

    init(root: URL) throws {
        self.root = root
        let raw = try Data(contentsOf: root.appendingPathComponent(BundleContract.manifestFile))
        guard let nl = raw.firstIndex(of: 0x0A) else { throw TrainError.bundle("\(root.path)/manifest.json: no first line") }
        let head = String(decoding: raw[raw.startIndex...nl], as: UTF8.self)
        let prefix = "{\"\(BundleContract.manifestDigestField)\": \""
        guard head.hasPrefix(prefix), head.hasSuffix("\",\n"), head.count == prefix.count + 64 + 3
        else { throw TrainError.bundle("\(root.path)/manifest.json: first line does not carry \(BundleContract.manifestDigestField)") }
        manifestSha256 = String(head.dropFirst(prefix.count).prefix(64))
        let body = raw[(nl + 1)...]
        guard CacheWriter.hex(SHA256.hash(data: body)) == manifestSha256
        else { throw TrainError.bundle("\(root.path)/manifest.json: contents do not match \(BundleContract.manifestDigestField) (edited or corrupt)") }
        manifest = try PyJson.parse(String(decoding: raw, as: UTF8.self))
        manifestObject = try JSONSerialization.jsonObject(with: raw) as? [String: Any] ?? [:]
        guard manifest[BundleContract.bundleKindField]?.stringValue == BundleContract.modelBundleKind
        else { throw TrainError.bundle("\(root.path) is a subject bundle (it already has photos and a schedule): train it; the subject stage takes a model bundle (ditskip-edge compile without --images)") }
    }

    private func section(_ name: String) throws -> PyValue {
        guard let v = manifest[name], v.pairs != nil
        else { throw TrainError.bundle("\(root.path)/manifest.json: field \(name) is missing or not an object") }
        return v
    }

    private func int(_ v: PyValue, _ k: String) throws -> Int {
        guard let i = v[k]?.intValue else { throw TrainError.bundle("\(root.path)/manifest.json: field \(k) is missing or not an integer") }
        return i
    }

    func spans() throws -> SkipSpans {
        let p = try section("plan")
        return SkipSpans(numBlocks: try int(p, "num_blocks"), nFront: try int(p, "n_front"), nBack: try int(p, "n_back"))
    }

    func scheduleConfig() throws -> ScheduleConfig {
        let s = try section("schedule")
        var dynamic = true
        if case let .bool(b)? = s["dynamic_patches"] { dynamic = b }
        return ScheduleConfig(steps: try int(s, "steps"), gradAccum: try int(s, "grad_accum"), sMinPx: try int(s, "s_min_px"),
                              sMaxPx: try int(s, "s_max_px"), multiplePx: try int(s, "multiple_px"),
                              seed: UInt64(try int(s, "seed")), tSampling: s["t_sampling"]?.stringValue ?? "uniform",
                              dynamicPatches: dynamic)
    }

    func codecSpec() throws -> String {
        guard let s = try section("model_bundle")["cache_codec"]?.stringValue
        else { throw TrainError.bundle("\(root.path)/manifest.json: field model_bundle.cache_codec is missing or not a string") }
        return s
    }

    func codec() throws -> CacheCodec { try CacheCodec.parse(try codecSpec()) }

    /// The manifest's `files`: bundle-relative path -> {sha256, bytes}, in order.
    func files() throws -> [(String, PyValue)] { try section("files").pairs ?? [] }

    /// bundle.py verify_files (Bundle.open(verify=True)): every listed file present, its size and SHA-256 the manifest's.
    func verifyFiles() throws {
        for (rel, info) in try files() {
            let u = root.appendingPathComponent(rel)
            guard let size = (try? FileManager.default.attributesOfItem(atPath: u.path)[.size] as? NSNumber)?.intValue
            else { throw TrainError.bundle("\(u.path): listed in the manifest but missing") }
            guard size == info["bytes"]?.intValue
            else { throw TrainError.bundle("\(u.path): \(size) bytes, manifest says \(info["bytes"]?.intValue ?? -1)") }
            guard try SubjectBundle.sha256(u) == info["sha256"]?.stringValue
            else { throw TrainError.bundle("\(u.path): SHA-256 does not match the manifest (file changed or corrupt)") }
        }
    }

    func entryShapes() throws -> [(String, [Int])] {
        (try section("model_bundle")["entry_shapes"]?.pairs ?? []).map { k, v in (k, (v.listValue ?? []).compactMap { $0.intValue }) }
    }

    /// The prompts in order, each with its text conditioning file (bundle-relative).
    func prompts() throws -> [(String, String)] {
        let promptsKey = "prompts", promptKey = "prompt"
        return (try section("model_bundle")[promptsKey]?.listValue ?? []).map { p in
            (p[promptKey]?.stringValue ?? "", p["text_conditioning"]?.stringValue ?? "")
        }
    }

    /// subject.py run_identity: what an interrupted run must match to be continued.
    func runIdentity(_ photos: [SubjectPhoto], prompt: String, mode: String) -> String {
        let v = PyValue.object([("model_bundle", .string(manifestSha256)),
                                ("photos", .list(photos.map { .list([.string($0.name), .string($0.sha256)]) })),
                                ("prompt", .string(prompt)), ("cache_mode", .string(mode))])
        return CacheWriter.hex(SHA256.hash(data: Data(PyJson.dumps(v, sortKeys: true).utf8)))
    }

    /// The residual cache of `photos` (sorted by file name, normalised) for prompt `promptIndex`, into
    /// `<work>/subject/cache`, stored mode, resumable; nil when stopped after `stopAfter` new entries.
    @discardableResult
    func writeCache(_ photos: [SubjectPhoto], promptIndex: Int, work: URL, stopAfter: Int? = nil,
                    runner: ForwardRunner? = nil, progress: (Int, Int) -> Void = { _, _ in }) throws -> PyValue? {
        let minPhotos = try int(try section("model_bundle"), "min_photos")
        guard photos.count >= minPhotos else { throw TrainError.bundle("\(photos.count) photos: this model bundle needs at least \(minPhotos)") }
        let cfg = try scheduleConfig()
        let sizes = photos.map { [$0.h, $0.w] }
        let samples = Schedule.make(cfg, sizesHw: sizes)
        let spans = try spans()
        let schedule = SubjectStage.scheduleJson(cfg, samples: samples, photoNames: photos.map { $0.name }, sizesHw: sizes)
        let model = try section("model")
        let identity = SubjectStage.cacheIdentity(modelName: model["name"] ?? .null,
                                                  transformerConfig: model["transformer_config"] ?? .null,
                                                  spans: spans, schedule: schedule)
        let (prompt, condFile) = try prompts()[promptIndex]
        var cond: [String: FloatTensor] = [:]
        for (k, t) in try Safetensors.read(root.appendingPathComponent(condFile)).tensors {
            cond[BundleContract.condPrefix + k] = FloatTensor(shape: t.shape, data: CodecEncoder.floats(t.bytes))
        }
        let run: ForwardRunner
        if let r = runner { run = r } else { run = try EtForwardRunner(root: root, manifest: manifestObject) }
        let writer = try CacheWriter(dir: work.appendingPathComponent("subject/cache"), identity: identity, codec: try codec(),
                                     shapes: try entryShapes(), resumable: true,
                                     run: runIdentity(photos, prompt: prompt, mode: BundleContract.storedMode))
        return try SubjectStage.writeCache(writer, samples: samples, photos: photos.map { (h: $0.h, w: $0.w, pixels: $0.pixels) },
                                           runner: run, spans: spans, sMin: cfg.sMinPx, cond: cond,
                                           stopAfter: stopAfter, progress: progress)
    }
}
