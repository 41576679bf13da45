import Foundation

/// A subject-stage program: `encode` (or a tiled encode's `encode.<h>x<w>`, or a staged encoder's `<that>.s<k>`),
/// `embed`, or `block` with its index (manifest ProgramEntry.block).
struct ProgramKey: Hashable { let name: String; var block: Int = -1 }

/// Runs one forward-only program on named float32 inputs (runtime/forward.py ProgramRunner): the app's is
/// EtForwardRunner; SubjectStage.kt's JVM check uses a stand-in.
protocol ForwardRunner {
    func run(_ program: ProgramKey, _ inputs: [String: FloatTensor]) throws -> [String: FloatTensor]
    /// Drop the program kept loaded between calls, if any: a tiled encode's tile program (a staged encoder's stage
    /// program) stays loaded while the tiles of its shape run (forward.py encoder(key, stage)), until another encode
    /// program or this (SubjectStage.encodeShape calls it after each stage).
    func release()
}

extension ForwardRunner {
    func release() {}
}

/// The manifest's `encode_tiling` (runtime/forward.py encode_tiling_of, EncodeTiling in SubjectStage.kt): the subject
/// stage's encoder on pixel tiles of the s_min crop, `programs` naming each pixel tile shape's program ("HxW" ->
/// "encode.HxW"); a bundle without the record is untiled: the one `encode` program on the whole crop. `stages`
/// (compile --encode-stages; absent or 1: unsplit): each `programs` value <name> stands for the chain of the encoder's
/// stage programs "<name>.s0" .. "<name>.s<stages-1>" (`chainOf`).
struct EncodeTiling {
    let tilePx: Int; let stridePx: Int; let scale: Int; let tiled: Bool
    let programs: [(String, String)]
    var stages: Int = 1

    static func untiled(_ sMin: Int) -> EncodeTiling {
        EncodeTiling(tilePx: sMin, stridePx: sMin, scale: 0, tiled: false,
                     programs: [(Tiling.shapeKey(sMin, sMin), BundleContract.etEncode)])
    }

    /// runtime/contract.py encode_stage_names: `name` itself, or with the encoder split into `stages` programs
    /// "<name>.s0" .. "<name>.s<stages-1>" (stage 0 takes "patch", each later one the previous "features", the last
    /// gives "x0").
    static func stageNames(_ name: String, _ stages: Int) -> [String] {
        stages <= 1 ? [name] : (0..<stages).map { "\(name).s\($0)" }
    }

    func program(_ key: String) -> String? { programs.first { $0.0 == key }?.1 }

    /// The programs of the encode of pixel tile shape `key` ("HxW"), in the order they run; nil: no such tile.
    func chainOf(_ key: String) -> [String]? { program(key).map { EncodeTiling.stageNames($0, stages) } }

    /// Every program the encode needs: each tile shape's chain, in `programs`' order.
    func allPrograms() -> [String] { programs.flatMap { EncodeTiling.stageNames($0.1, stages) } }
}

/// The skip plan's spans (manifest `plan`).
struct SkipSpans { let numBlocks: Int; let nFront: Int; let nBack: Int }

/// The subject stage on the phone (issue 15): the Swift twin of SubjectStage.kt (run on the JVM against
/// runtime/subject.py write_cache in tests/test_app_subject_stage.py) and of runtime/forward.py. Per sample: crop ->
/// `encode` -> x0; noise = PortableRng(noise seed); `embed`, the block programs one at a time -> the front / back
/// residuals -> the bundle's codec -> a resumable CacheWriter. Not compiled here (no Swift compiler).
enum SubjectStage {
    static let streamPrefix = "stream."        // runtime/contract.py STREAM_PREFIX, CTX_PREFIX
    static let ctxPrefix = "ctx."
    static let imgStream = "img"
    static let patchInput = "patch"
    static let featuresInput = "features"      // a staged encoder's between stages (contract.py)
    static let relErrorKey = "rel_error"

    /// photo + the sample's crop box -> x0 (the encode program on the crop resized to s_min; tiled: forward.py x0, the
    /// tile programs on its pixel tiles, all tiles of one shape in one call (Tiling.encodeTiledShapes), the latent
    /// tiles blended as encode_tiled does; staged: `encodeShape`, one stage's program loaded at a time).
    static func x0(_ runner: ForwardRunner, photo: [Float], h: Int, w: Int, sample s: PlannedSample, sMin: Int,
                   tiling: EncodeTiling? = nil) throws -> FloatTensor {
        let patch = FloatTensor(shape: [1, 3, sMin, sMin], data: Patches.crop(photo, h: h, w: w, x0: s.x0, y0: s.y0, side: s.side, out: sMin))
        let t = tiling ?? EncodeTiling.untiled(sMin)
        defer { runner.release() }                                       // forward.py: no encode program kept
        let x0: Tiling.Tile
        if !t.tiled {
            x0 = try encodeShape(runner, tiling: t, [patch.data], sMin, sMin)[0]
        } else {
            x0 = try Tiling.encodeTiledShapes(patch.data, h: sMin, w: sMin, tilePx: t.tilePx, stridePx: t.stridePx,
                                              scale: t.scale) { parts, th, tw in
                try encodeShape(runner, tiling: t, parts, th, tw)
            }
        }
        return FloatTensor(shape: [1, x0.c, x0.h, x0.w], data: x0.data)
    }

    /// forward.py encode_shape (SubjectStage.kt encodeShape): the pixel tiles [3, th, tw] of one shape -> their
    /// latents, each program of the shape's chain (the tile program, or the encoder's stage programs) run on every
    /// tile, then released before the next stage's loads (one encode program loaded at a time).
    static func encodeShape(_ runner: ForwardRunner, tiling: EncodeTiling, _ parts: [[Float]], _ th: Int, _ tw: Int) throws -> [Tiling.Tile] {
        guard let chain = tiling.chainOf(Tiling.shapeKey(th, tw))
        else { throw TrainError.bundle("\(BundleContract.encodeTilingField): no program for a \(th)x\(tw)-px tile") }
        var xs = parts.map { FloatTensor(shape: [1, 3, th, tw], data: $0) }
        for (k, name) in chain.enumerated() {
            let input = k == 0 ? patchInput : featuresInput
            let output = k == chain.count - 1 ? BundleContract.x0Key : featuresInput
            xs = try xs.map { x in
                guard let y = try runner.run(ProgramKey(name: name), [input: x])[output]
                else { throw TrainError.bundle("the \(name) program gives no \(output)") }
                return y
            }
            runner.release()                                             // this stage done: its program dropped
        }
        return xs.map { Tiling.Tile(c: $0.shape[1], h: $0.shape[2], w: $0.shape[3], data: $0.data) }
    }

    /// The one-line refusal of a bundle without the subject programs it lists (forward.py subject_programs: the first
    /// 4 missing named).
    static func noProgramsMessage(_ where_: String, _ missing: [String]) -> String {
        "\(where_): no \(missing.prefix(4).joined(separator: ", ")) program: this bundle cannot run the subject stage (compile it without --images: a model bundle)"
    }

    /// One sample's residuals ["front.<s>" every stream, "back.img"] in forward.py's order and arithmetic.
    static func residuals(_ runner: ForwardRunner, spans: SkipSpans, x0: FloatTensor, noise: FloatTensor, t: Float,
                          cond: [String: FloatTensor]) throws -> [(String, FloatTensor)] {
        var inputs = cond
        inputs[BundleContract.fixedInputs[0]] = x0
        inputs[BundleContract.fixedInputs[1]] = noise
        inputs[BundleContract.fixedInputs[2]] = FloatTensor(shape: [1], data: [t])
        let out = try runner.run(ProgramKey(name: BundleContract.etEmbed), inputs)
        var streams = out.filter { $0.key.hasPrefix(streamPrefix) }
        let ctx = out.filter { $0.key.hasPrefix(ctxPrefix) }
        let embedded = streams
        var res: [(String, FloatTensor)] = []
        func front() throws {
            for k in streams.keys.sorted() {
                res.append(("front." + k.dropFirst(streamPrefix.count), try minus(streams[k]!, embedded[k]!)))
            }
        }
        let backStart = spans.numBlocks - spans.nBack
        let last = spans.nBack > 0 ? spans.numBlocks : spans.nFront
        var keptOut: FloatTensor?
        for i in 0..<last {
            if i == spans.nFront && spans.nFront > 0 { try front() }
            if i == backStart { keptOut = streams[streamPrefix + imgStream] }
            streams = try runner.run(ProgramKey(name: BundleContract.etBlock, block: i), streams.merging(ctx) { a, _ in a })
        }
        if spans.nFront > 0 && last == spans.nFront { try front() }              // no back span
        if spans.nBack > 0 { res.append(("back." + imgStream, try minus(streams[streamPrefix + imgStream]!, keptOut!))) }
        return res
    }

    private static func minus(_ a: FloatTensor, _ b: FloatTensor) throws -> FloatTensor {
        guard a.shape == b.shape else { throw TrainError.bundle("stream shapes \(a.shape) and \(b.shape) differ") }
        return FloatTensor(shape: a.shape, data: zip(a.data, b.data).map { $0 - $1 })
    }

    /// Encode x0 + one sample's residuals with the writer's codec and append them with each residual's coding error.
    static func addEntry(_ writer: CacheWriter, index: Int, x0: FloatTensor, residuals: [(String, FloatTensor)]) throws {
        let parts = try CodecEncoder.encodeEntry(writer.codec, [(BundleContract.x0Key, x0)] + residuals)
        var rel: [(String, PyValue)] = []
        for (name, d) in residuals {
            let c = writer.codec.forName(name)
            var mine: [String: EncodedPart] = [:]
            for (p, _, _) in c.parts(d.shape) { let key = "\(name).\(p)"; mine[p] = parts[key] }
            rel.append((name, .double(CodecEncoder.relativeError(CodecEncoder.decodeTensor(c, mine, d.shape), d.data))))
        }
        try writer.add(index, parts, extra: .object([(relErrorKey, .object(rel))]))
    }

    /// Photos (normalised [3, h, w], the schedule's order) + schedule -> the residual cache, resumable (subject.py
    /// write_cache, stored mode). Returns the index, or nil when stopped after `stopAfter` new entries.
    @discardableResult
    static func writeCache(_ writer: CacheWriter, samples: [PlannedSample], photos: [(h: Int, w: Int, pixels: [Float])],
                           runner: ForwardRunner, spans: SkipSpans, sMin: Int, cond: [String: FloatTensor],
                           stopAfter: Int? = nil, encodeTiling: EncodeTiling? = nil,
                           progress: (Int, Int) -> Void = { _, _ in }) throws -> PyValue? {
        try writer.codec.requireEncodable(writer.shapes.map { $0.0 }.filter { $0 != BundleContract.x0Key })
        var computed = 0
        for s in samples.dropFirst(writer.nextIndex) {
            let p = photos[s.photo]
            let latent = try x0(runner, photo: p.pixels, h: p.h, w: p.w, sample: s, sMin: sMin, tiling: encodeTiling)
            let noise = FloatTensor(shape: latent.shape, data: PortableRng.normal(seed: s.noiseSeed, count: latent.data.count))
            let res = try residuals(runner, spans: spans, x0: latent, noise: noise, t: Float(s.t), cond: cond)
            try addEntry(writer, index: s.index, x0: latent, residuals: res)
            computed += 1
            progress(writer.nextIndex, samples.count)
            if let stop = stopAfter, computed >= stop, writer.nextIndex < samples.count {
                writer.close()
                return nil
            }
        }
        return try writer.finish(extra: [(relErrorKey, relErrorSummary(writer.extras))])
    }

    /// {residual: {"mean", "max"}} over the entries' journalled coding errors (subject.py).
    static func relErrorSummary(_ extras: [PyValue]) -> PyValue {
        var names: [String] = []
        var errors: [String: [Double]] = [:]
        for extra in extras {
            for (k, v) in extra[relErrorKey]?.pairs ?? [] {
                if errors[k] == nil { names.append(k); errors[k] = [] }
                errors[k]!.append(v.doubleValue ?? .nan)
            }
        }
        return .object(names.map { k -> (String, PyValue) in
            let v = errors[k]!
            var sum = 0.0
            for x in v { sum += x }
            return (k, .object([("mean", .double(sum / Double(v.count))), ("max", .double(v.max()!))]))
        })
    }

    /// The schedule as schedule.json and the cache identity hold it (runtime/schedule.py Schedule.to_json).
    static func scheduleJson(_ cfg: ScheduleConfig, samples: [PlannedSample], photoNames: [String], sizesHw: [[Int]]) -> PyValue {
        var clamped = 0
        if cfg.dynamicPatches {
            for s in samples where Schedule.cropSide(s.t, sMin: cfg.sMinPx, sMax: cfg.sMaxPx, multiple: cfg.multiplePx,
                                                     shortSide: min(sizesHw[s.photo][0], sizesHw[s.photo][1])).1 {
                clamped += 1
            }
        }
        let config = PyValue.object([("steps", .int(cfg.steps)), ("grad_accum", .int(cfg.gradAccum)),
            ("s_min_px", .int(cfg.sMinPx)), ("s_max_px", .int(cfg.sMaxPx)), ("multiple_px", .int(cfg.multiplePx)),
            ("seed", .int(Int(cfg.seed))), ("t_sampling", .string(cfg.tSampling)), ("dynamic_patches", .bool(cfg.dynamicPatches))])
        let rows = samples.map { s -> PyValue in
            .list([.int(s.index), .int(s.photo), .double(s.t), .list([.int(s.x0), .int(s.y0), .int(s.side)]), .int(Int(s.noiseSeed))])
        }
        return .object([("algorithm", .int(BundleContract.scheduleAlgorithm)), ("config", config),
                        ("photo_names", .list(photoNames.map { .string($0) })), ("clamped_samples", .int(clamped)),
                        ("samples", .list(rows)), ("sample_fields", .list(BundleContract.sampleFields.map { .string($0) }))])
    }

    /// What the cache is computed for (runtime/bundle.py cache_identity).
    static func cacheIdentity(modelName: PyValue, transformerConfig: PyValue, spans: SkipSpans, schedule: PyValue) -> PyValue {
        .object([("model", modelName), ("transformer_config", transformerConfig),
                 ("plan", .list([.int(spans.numBlocks), .int(spans.nFront), .int(spans.nBack)])), ("schedule", schedule)])
    }
}

/// The model bundle's encode / embed / block programs through the Objective-C++ bridge over ExecuTorch's C++ Module
/// (DSModule), one loaded at a time (loaded for its call, released after it: forward.py's default; a tiled encode's
/// tile program, or a staged encoder's stage program, stays loaded for the tiles of its shape, until the next one or
/// `release`). DSModule takes no
/// data file, so a program whose weights are in a .ptd (compile --weights mapped) is refused with one line.
final class EtForwardRunner: ForwardRunner {
    private let root: URL
    private var entries: [ProgramKey: [String: Any]] = [:]
    private var held: ProgramKey?                                         // the tile program kept loaded, and its module
    private var heldModule: DSModule?

    init(root: URL, manifest: [String: Any]) throws {
        self.root = root
        for p in manifest[BundleContract.programsField] as? [[String: Any]] ?? [] {
            guard p["runtime"] as? String == BundleContract.etRuntime, let name = p["name"] as? String,
                  [BundleContract.etEncode, BundleContract.etEmbed, BundleContract.etBlock].contains(name) || EtForwardRunner.isTile(name)
            else { continue }
            let key = name == BundleContract.etBlock ? ProgramKey(name: name, block: p["block"] as? Int ?? -1) : ProgramKey(name: name)
            if let data = p[BundleContract.etDataField] as? [String], let first = data.first {
                throw TrainError.bundle("\(root.path)/manifest.json: program \(p[BundleContract.etProgramField] ?? "") keeps its weights in \(first); the app's ExecuTorch bridge loads no data file: compile the model bundle with --weights resident for this app")
            }
            entries[key] = p
        }
        // the encode programs encode_tiling lists (absent: the one `encode`; staged: each one's stage programs),
        // refused in one line naming the missing (forward.py subject_programs: at most 4)
        let rec = manifest[BundleContract.encodeTilingField] as? [String: Any]
        let tiles = rec?[BundleContract.encodeTilingProgramsField] as? [String: String]
        let stages = rec?[BundleContract.encodeTilingStagesField] as? Int ?? 1
        let encoders = tiles.map { Array($0.values).sorted() } ?? [BundleContract.etEncode]
        var missing: [String] = []
        for name in encoders.flatMap({ EncodeTiling.stageNames($0, stages) }) + [BundleContract.etEmbed]
            where entries[ProgramKey(name: name)] == nil && !missing.contains(name) {
            missing.append(name)
        }
        guard missing.isEmpty else { throw TrainError.bundle(SubjectStage.noProgramsMessage("\(root.path)/manifest.json", missing)) }
    }

    static func isTile(_ name: String) -> Bool { name.hasPrefix(BundleContract.etEncode + ".") }

    func release() {
        held = nil; heldModule = nil                                      // the module is released with its reference
    }

    func run(_ program: ProgramKey, _ inputs: [String: FloatTensor]) throws -> [String: FloatTensor] {
        guard let p = entries[program], let rel = p[BundleContract.etProgramField] as? String,
              let specs = p[BundleContract.etInputsField] as? [[String: Any]], let outSpecs = p["outputs"] as? [[String: Any]]
        else { throw TrainError.bundle("\(root.path)/manifest.json: no \(program.name) program \(program.block >= 0 ? "for block \(program.block)" : "")") }
        let path = root.appendingPathComponent(rel).path
        let args = try specs.map { spec -> DSTensorInput in
            let name = spec["name"] as? String ?? "", shape = spec["shape"] as? [Int] ?? []
            guard let t = inputs[name] else { throw TrainError.bundle("\(path): input \(name) has no source") }
            guard t.shape == shape else { throw TrainError.bundle("\(path): input \(name) has shape \(t.shape), the program expects \(shape)") }
            return DSTensorInput(bytes: t.data.withUnsafeBufferPointer { Data(buffer: $0) }, dtype: "float32",
                                 shape: shape.map { NSNumber(value: $0) })
        }
        if held != nil && held != program { release() }                 // another tile shape, or another program
        let module = try heldModule ?? DSModule(path: path)   // released when this call returns, unless held
        if EtForwardRunner.isTile(program.name) { held = program; heldModule = module }
        let outs = try module.forward(args)
        guard outs.count == outSpecs.count else { throw TrainError.bundle("\(path): \(outs.count) outputs, the manifest lists \(outSpecs.count)") }
        var res: [String: FloatTensor] = [:]
        for (o, spec) in zip(outs, outSpecs) {
            let floats = o.floats.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
            res[spec["name"] as? String ?? ""] = FloatTensor(shape: o.shape.map { $0.intValue }, data: floats)
        }
        return res
    }
}
