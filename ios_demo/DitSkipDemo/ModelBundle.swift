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

    /// The manifest's encode_tiling (forward.py encode_tiling_of): absent (a bundle written before it) = untiled, the
    /// one `encode` program on the whole s_min crop; its `stages` absent = 1 (an unsplit encoder).
    func encodeTiling() throws -> EncodeTiling {
        let f = BundleContract.encodeTilingField
        guard let m = manifest[f] else { return EncodeTiling.untiled(try scheduleConfig().sMinPx) }
        guard m.pairs != nil, let progs = m[BundleContract.encodeTilingProgramsField]?.pairs
        else { throw TrainError.bundle("\(root.path)/manifest.json: field \(f).\(BundleContract.encodeTilingProgramsField) is missing or not an object") }
        var programs: [(String, String)] = []
        for (k, v) in progs {
            guard let name = v.stringValue else { throw TrainError.bundle("\(root.path)/manifest.json: field \(f).programs.\(k) is not a program name") }
            programs.append((k, name))
        }
        var tiled = false
        if case let .bool(b)? = m["tiled"] { tiled = b }
        let stages = try m[BundleContract.encodeTilingStagesField] == nil ? 1 : int(m, BundleContract.encodeTilingStagesField)
        return EncodeTiling(tilePx: try int(m, "tile_px"), stridePx: try int(m, "stride_px"), scale: tiled ? try int(m, "scale") : 0,
                            tiled: tiled, programs: programs, stages: stages)
    }

    /// The encode part of subject.py check_programs (ModelBundle.kt checkPrograms), before any work: every encode
    /// program encode_tiling lists (staged: every stage program of each) and the embed program exist (refused in one
    /// line naming the missing, at most 4); tiled: the tiles are those of tile_px every stride_px on the s_min crop,
    /// each tile program takes its pixel tile and gives its part of entry_shapes' x0; untiled: encode takes the s_min
    /// patch and gives x0; staged: the first stage takes the patch, the last gives x0, each stage takes what the one
    /// before gives.
    func checkEncodePrograms() throws {
        let where_ = "\(root.path)/manifest.json"
        let tiling = try encodeTiling()
        let et = (manifest[BundleContract.programsField]?.listValue ?? []).filter { $0["runtime"]?.stringValue == BundleContract.etRuntime }
        func named(_ name: String) -> PyValue? { et.first { $0["name"]?.stringValue == name } }
        var missing: [String] = []
        for name in tiling.allPrograms() + [BundleContract.etEmbed] where named(name) == nil && !missing.contains(name) {
            missing.append(name)
        }
        guard missing.isEmpty else { throw TrainError.bundle(SubjectStage.noProgramsMessage(where_, missing)) }
        let sMin = try scheduleConfig().sMinPx
        guard let x0Shape = try entryShapes().first(where: { $0.0 == BundleContract.x0Key })?.1, x0Shape.count == 4
        else { throw TrainError.bundle("\(where_): entry_shapes has no \(BundleContract.x0Key)") }
        if tiling.tiled {
            let want = Tiling.tileShapes(sMin, sMin, tile: tiling.tilePx, stride: tiling.stridePx).map { Tiling.shapeKey($0[0], $0[1]) }
            guard Set(tiling.programs.map { $0.0 }) == Set(want)
            else { throw TrainError.bundle("\(where_): \(BundleContract.encodeTilingField) lists tiles \(tiling.programs.map { $0.0 }.sorted()), not those of \(tiling.tilePx)-px tiles every \(tiling.stridePx) px on the \(sMin)-px crop") }
        }
        func shape(_ p: PyValue, _ field: String, _ name: String) -> [Int]? {
            p[field]?.listValue?.first { $0["name"]?.stringValue == name }?["shape"]?.listValue?.compactMap { $0.intValue }
        }
        func firstShape(_ p: PyValue, _ field: String) -> [Int]? {
            p[field]?.listValue?.first?["shape"]?.listValue?.compactMap { $0.intValue }
        }
        for (key, name) in tiling.programs {
            let chain = (tiling.chainOf(key) ?? [name]).map { named($0)! }
            let enc = chain.first!, last = chain.last!
            let hw = key.split(separator: "x").compactMap { Int($0) }
            guard hw.count == 2 else { throw TrainError.bundle("\(where_): \(BundleContract.encodeTilingField) tile \(key) is not HxW") }
            let (th, tw) = (hw[0], hw[1])
            let wantX0 = Array(x0Shape.prefix(2)) + [th * x0Shape[2] / sMin, tw * x0Shape[3] / sMin]
            guard let patch = shape(enc, "inputs", SubjectStage.patchInput), Array(patch.dropFirst(2)) == [th, tw],
                  shape(last, "outputs", BundleContract.x0Key) == wantX0, tiling.tiled || (th == sMin && tw == sMin)
            else { throw TrainError.bundle("\(where_): \(enc["path"]?.stringValue ?? name) is not this model's encoder (patch/x0 shapes differ from the \(key) px \(tiling.tiled ? "tile" : "s_min crop") and entry_shapes x0 \(x0Shape))") }
            for (before, stage) in zip(chain, chain.dropFirst()) {      // a staged encoder: each stage takes what the one before gives
                let gives = firstShape(before, "outputs"), takes = firstShape(stage, "inputs")
                guard gives == takes
                else { throw TrainError.bundle("\(where_): encoder stage \(stage["path"]?.stringValue ?? "") takes \(takes ?? []), \(before["path"]?.stringValue ?? "") gives \(gives ?? []): the stages are not one encoder's") }
            }
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
        try checkEncodePrograms()                                        // refused before any work
        let run: ForwardRunner
        if let r = runner { run = r } else { run = try EtForwardRunner(root: root, manifest: manifestObject) }
        let writer = try CacheWriter(dir: work.appendingPathComponent("subject/cache"), identity: identity, codec: try codec(),
                                     shapes: try entryShapes(), resumable: true,
                                     run: runIdentity(photos, prompt: prompt, mode: BundleContract.storedMode))
        return try SubjectStage.writeCache(writer, samples: samples, photos: photos.map { (h: $0.h, w: $0.w, pixels: $0.pixels) },
                                           runner: run, spans: spans, sMin: cfg.sMinPx, cond: cond,
                                           stopAfter: stopAfter, encodeTiling: try encodeTiling(), progress: progress)
    }
}
