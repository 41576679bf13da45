import Foundation

/// Generation on the phone after training, line for line ditskip_edge/runtime/generation.py (and the Android app's
/// Generator.kt) over the bundle's generation programs (manifest `generation`, the gen_* / decode / text_encoder
/// program entries), through the Objective-C++ bridge over ExecuTorch's C++ Module (ETInferenceBridge):
///
///   cond = text(prompt), uncond = text("")          HashText (built-in tiny models) | Wordpiece + text_encoder.pte |
///                                                   a pipeline's encoders in order: each one's tokenizer.json (HfTokenizer)
///                                                   + its program (FLUX: CLIP -> pooled, T5 -> txt; SANA: Gemma-2 -> txt,
///                                                   txt_mask), each program loaded once and run once per branch
///   x    = PortableRng.normal(seed, latent_shape)
///   branches: uncond, cond (cond alone at guidance 1); every program at batch 1, once per branch
///   for each sigma: values[b] = gen_embed(x, t, b's conditioning)
///                   for each block in order, each branch b: values[b] += gen_block.<kind>(values[b], block weights)
///                   v_b = gen_head(values[b]);  x += (sigma_next - sigma) (v_u + g (v_c - v_u))
///   image = clip(decode(x) * 0.5 + 0.5, 0, 1)        [H, W, 3] row-major
///           decode: decode.<h>x<w> per latent tile, the tiles blended as diffusers' tiled_decode (Tiling.swift)
///
/// A program's inputs are found by name among the values computed so far; `w.<state>` inputs are the block's weights,
/// read in place from the memory-mapped weights file (and the merged LoRA file written after training).
final class Generator {
    let root: URL
    let gen: [String: Any]
    let arch: String
    let precision: String
    let loraRecord: [String: Any]
    private var programs: [String: [String: Any]] = [:]
    private var wordpiece: Wordpiece?
    /// A pipeline's encoders in order (generation.text.encoders): program, role, tokenizer (file, max_len, pad_id,
    /// limits_prompt, preprocess).
    private let encoders: [[String: Any]]
    /// The text encoder programs, in the order they run (none for hash text).
    private let textPrograms: [String]
    private var hfTokenizers: [String: HfTokenizer] = [:]      // program -> its tokenizer, read on first use

    init(bundle: TrainingBundle, precision: String? = nil) throws {
        root = bundle.root
        guard let gen = bundle.manifest[BundleContract.genField] as? [String: Any]
        else { throw TrainError.bundle("manifest.json: no generation part (compile with --generation)") }
        guard gen["format_version"] as? Int == BundleContract.genFormatVersion
        else { throw TrainError.bundle("generation part format \(gen["format_version"] ?? "none"), this app reads \(BundleContract.genFormatVersion): recompile with --generation") }
        let textKind = (gen["text"] as? [String: Any])?["kind"] as? String ?? ""
        guard BundleContract.genAppTextKinds.contains(textKind)
        else { throw TrainError.bundle("generation text encoders of kind '\(textKind)': this app tokenizes \(BundleContract.genAppTextKinds.joined(separator: ", ")) only (generate with python -m ditskip_edge.runtime generate)") }
        self.gen = gen
        arch = ((bundle.manifest["model"] as? [String: Any])?["arch"] as? String) ?? "flux"
        self.precision = precision ?? ((gen["precisions"] as? [String])?.first ?? "fp32")
        loraRecord = bundle.manifest[BundleContract.loraFileField] as? [String: Any] ?? [:]
        let encoders = (gen["text"] as? [String: Any])?["encoders"] as? [[String: Any]] ?? []
        self.encoders = encoders
        textPrograms = textKind == "pipeline" ? encoders.compactMap { $0["program"] as? String }
            : textKind == "minilm" ? [BundleContract.genTextEncoder] : []
        for p in bundle.manifest[BundleContract.programsField] as? [[String: Any]] ?? [] {
            let name = p["name"] as? String ?? ""
            let shared = textPrograms.contains(name) || name.hasPrefix(BundleContract.genDecodePrefix)
            if p["runtime"] as? String == BundleContract.etRuntime
                && (shared || p[BundleContract.etPrecisionField] as? String == self.precision) { programs[name] = p }
        }
        if let text = gen["text"] as? [String: Any], let tk = text["tokenizer"] as? [String: Any],
           let vocab = tk["vocab"] as? String, let maxLen = tk["max_len"] as? Int {
            wordpiece = try Wordpiece(vocabFile: root.appendingPathComponent(vocab), maxLen: maxLen)
        }
    }

    private var text: [String: Any] { gen["text"] as? [String: Any] ?? [:] }
    static let velocity = "v"                 // gen_head's output
    static let imageOutput = "image"          // decode's output

    /// (tokens the prompt needs, tokens the encoder takes, what a token is): generation refuses a longer prompt. For a
    /// pipeline, the encoder that limits the prompt (T5, Gemma-2: FLUX's CLIP truncates at 77 tokens as FluxPipeline
    /// does).
    func countTokens(_ prompt: String) throws -> (Int, Int, String) {
        if text["kind"] as? String == "pipeline" {
            guard let e = encoders.first(where: { ($0["tokenizer"] as? [String: Any])?["limits_prompt"] as? Bool ?? false }),
                  let tk = e["tokenizer"] as? [String: Any], let maxLen = tk["max_len"] as? Int
            else { throw TrainError.bundle("generation.text.encoders: no encoder has tokenizer.limits_prompt (recompile with --generation)") }
            let pre = try HfTokenizer.preprocess(prompt, tk["preprocess"] as? String ?? "")
            let n = try hfTokenizer(e).countTokens(pre)
            return (n, maxLen, "\(e["role"] as? String ?? "text") tokens incl. special tokens")
        }
        let limit = text["seq_len"] as? Int ?? 0
        if let wp = wordpiece { return (wp.countTokens(prompt), limit, "WordPiece tokens incl. [CLS] [SEP]") }
        return (HashText.words(prompt).count, limit, "words")
    }

    func checkPrompt(_ prompt: String) throws {
        guard !prompt.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty
        else { throw TrainError.bundle("the prompt is empty: describe the picture") }
        let (n, limit, unit) = try countTokens(prompt)
        if n > limit { throw TrainError.bundle("the prompt has \(n) \(unit); the text encoder takes at most \(limit): shorten it") }
    }

    private func hfTokenizer(_ encoder: [String: Any]) throws -> HfTokenizer {
        guard let program = encoder["program"] as? String, let tk = encoder["tokenizer"] as? [String: Any],
              let file = tk["file"] as? String, let maxLen = tk["max_len"] as? Int, let padId = tk["pad_id"] as? Int
        else { throw TrainError.bundle("generation.text.encoders: an entry lacks program or tokenizer file / max_len / pad_id") }
        if let t = hfTokenizers[program] { return t }
        let t = try HfTokenizer.fromFile(root.appendingPathComponent(file), maxLen: maxLen, padId: padId)
        hfTokenizers[program] = t
        return t
    }

    /// (input_ids, attention_mask) of a prompt for one text encoder program: WordPiece (MiniLM), or the encoder's
    /// tokenizer.json after its preprocessing (a pipeline).
    private func tokenize(_ program: String, _ prompt: String) throws -> (ids: [Int64], mask: [Int64]) {
        guard let e = encoders.first(where: { $0["program"] as? String == program }) else {
            guard let wp = wordpiece else { throw TrainError.bundle("no tokenizer for the \(program) program") }
            return wp.encode(prompt)
        }
        let pre = try HfTokenizer.preprocess(prompt, (e["tokenizer"] as? [String: Any])?["preprocess"] as? String ?? "")
        return try hfTokenizer(e).encode(pre)
    }

    private func load(_ name: String) throws -> (DSModule, [String: Any]) {
        guard let p = programs[name], let path = p[BundleContract.etProgramField] as? String
        else { throw TrainError.bundle("no \(name) program at \(precision) (compile with --generation)") }
        return (try DSModule(path: root.appendingPathComponent(path).path), p)
    }

    /// Runs a program; `value(name, dtype, shape)` supplies each input (DSTensorInput or DSMappedInput).
    private func run(_ program: (DSModule, [String: Any]), _ value: (String, String, [Int]) throws -> NSObject) throws -> [String: DSTensorOutput] {
        let specs = program.1[BundleContract.etInputsField] as? [[String: Any]] ?? []
        let inputs = try specs.map { s in
            try value(s["name"] as! String, s["dtype"] as? String ?? "float32", s["shape"] as? [Int] ?? [])
        }
        let outs = try program.0.forward(inputs)
        let names = (program.1["outputs"] as? [[String: Any]] ?? []).map { $0["name"] as! String }
        return Dictionary(uniqueKeysWithValues: zip(names, outs))
    }

    private static func input(_ v: [Float], _ shape: [Int]) -> DSTensorInput {
        DSTensorInput(bytes: v.withUnsafeBufferPointer { Data(buffer: $0) }, dtype: "float32", shape: shape.map { NSNumber(value: $0) })
    }

    private static func floats(_ o: DSTensorOutput) -> [Float] {
        o.floats.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
    }

    /// cond.* of each branch's prompt (batch 1): hash text, or the text encoder programs in order, each loaded once
    /// (released before the next loads) and run once per branch, its outputs merged into the branch's conditioning.
    private func conditioning(_ branchPrompts: [String]) throws -> [[String: ([Int], [Float])]] {
        if textPrograms.isEmpty {
            return branchPrompts.map {
                HashText.encode($0, arch: arch, seqLen: text["seq_len"] as? Int ?? 0, dim: text["dim"] as? Int ?? 0,
                                pooledDim: text["pooled_dim"] as? Int ?? 0)
            }
        }
        var conds = [[String: ([Int], [Float])]](repeating: [:], count: branchPrompts.count)
        for name in textPrograms {
            let program = try load(name)
            for (b, p) in branchPrompts.enumerated() {
                let (ids, mask) = try tokenize(name, p)
                let out = try run(program) { input, _, shape in
                    var v: [Int64] = []
                    if input == "input_ids" { v = ids } else if input == "attention_mask" { v = mask }
                    else { throw TrainError.bundle("text encoder \(name): input \(input) is neither input_ids nor attention_mask") }
                    return DSTensorInput(bytes: v.withUnsafeBufferPointer { Data(buffer: $0) }, dtype: "int64", shape: shape.map { NSNumber(value: $0) })
                }
                for (k, o) in out { conds[b][k] = (o.shape.map { $0.intValue }, Generator.floats(o)) }
            }
        }
        return conds
    }

    func generate(prompt: String, seed: UInt64, steps: Int, guidance: Float, mergedLora: URL?,
                  onStep: (Int, Int) -> Void = { _, _ in }) throws -> [Float] {
        try checkPrompt(prompt)
        guard let weights = (gen["weights"] as? [String: String])?[precision]
        else { throw TrainError.bundle("no generation weights at \(precision)") }
        let base = try MappedWeights(root.appendingPathComponent(weights))
        let merged = try mergedLora.map { try MappedWeights($0) }
        // the guidance branches' prompts: [uncond = "", cond] (cond alone at guidance 1)
        let branchPrompts = guidance == 1 ? [prompt] : ["", prompt]
        var conds = try conditioning(branchPrompts)
        if (gen["cond_keys"] as? [String] ?? []).contains("guidance"), let g = gen["guidance_embeds"] as? Double {
            for b in conds.indices { conds[b][BundleContract.condPrefix + "guidance"] = ([1], [Float(g)]) }
        }
        let latent = gen["latent_shape"] as? [Int] ?? []
        var x = PortableRng.normal(seed: seed, count: latent.reduce(1, *))
        let s = gen["sampler"] as? [String: Any] ?? [:]
        let sig = Sampler.sigmas(steps: steps, shift: Float(s["shift"] as? Double ?? 1), dynamic: s["use_dynamic_shifting"] as? Bool ?? false,
                                 mu: s["mu"] as? Double, timeShiftType: s["time_shift_type"] as? String ?? "exponential")
        // one program loaded at a time (each holds its own planned arena), as runtime/generation.py Programs
        var current: (String, (DSModule, [String: Any]))? = nil
        func program(_ name: String) throws -> (DSModule, [String: Any]) {
            if let c = current, c.0 == name { return c.1 }
            current = nil
            let p = try load(name)
            current = (name, p)
            return p
        }
        for i in 0..<steps {
            var values: [[String: NSObject]] = Array(repeating: [:], count: conds.count)
            for b in conds.indices {
                for (k, o) in try run(try program(BundleContract.genEmbed), { name, _, shape in
                    if name == "x" { return Generator.input(x, shape) }
                    if name == "t" { return Generator.input([sig[i]], shape) }
                    return Generator.input(conds[b][name]!.1, shape)
                }) { values[b][k] = Generator.input(Generator.floats(o), o.shape.map { $0.intValue }) }
            }
            for block in gen["blocks"] as? [[String: Any]] ?? [] {
                let blockName = block["name"] as! String, kind = block["kind"] as! String
                for b in conds.indices {
                    let own = values[b]
                    let out = try run(try program(BundleContract.genBlockPrefix + kind)) { name, dtype, shape in
                        guard name.hasPrefix(BundleContract.genWeightPrefix) else { return own[name]! }
                        let key = blockName + "." + name.dropFirst(BundleContract.genWeightPrefix.count)
                        let source = (merged?.contains(key) ?? false) ? merged! : base
                        return try source.input(key, dtype: dtype, shape: shape)
                    }
                    for (k, o) in out { values[b][k] = Generator.input(Generator.floats(o), o.shape.map { $0.intValue }) }
                }
            }
            var v: [[Float]] = []
            for b in conds.indices { v.append(Generator.floats(try run(try program(BundleContract.genHead)) { name, _, _ in values[b][name]! }[Generator.velocity]!)) }
            Sampler.guidedEulerStep(&x, uncond: v.count == 2 ? v[0] : nil, cond: v[v.count - 1], guidance: guidance,
                                    sigma: sig[i], sigmaNext: sig[i + 1])
            onStep(i + 1, steps)
        }
        current = nil
        let image = try decode(x, latent)
        let chw = image.data
        let (h, w) = (image.h, image.w)
        return (0..<(h * w * 3)).map { k in min(max(chw[(k % 3) * h * w + k / 3] * 0.5 + 0.5, 0), 1) }
    }

    /// latents -> image [3, H, W]: the decode program per latent tile (one tile unless the bundle was compiled with
    /// --decode-tile-px), its `w.<state>` inputs from the mapped decoder weights, the tiles blended (Tiling.swift).
    private func decode(_ x: [Float], _ latent: [Int]) throws -> Tiling.Tile {
        guard let dec = gen[BundleContract.genDecodeField] as? [String: Any], let names = dec["programs"] as? [String: String],
              let tile = dec["tile_latent"] as? Int, let stride = dec["stride_latent"] as? Int, let scale = dec["scale"] as? Int
        else { throw TrainError.bundle("manifest.json: generation.decode is incomplete (recompile with --generation)") }
        let weights = try (dec["weights"] as? String).map { try MappedWeights(root.appendingPathComponent($0)) }
        let prefix = dec["weight_prefix"] as? String ?? ""
        var current: (String, (DSModule, [String: Any]))? = nil
        return try Tiling.decodeTiled(x, c: latent[1], h: latent[2], w: latent[3], tile: tile, stride: stride, scale: scale) { part, th, tw in
            guard let name = names[Tiling.shapeKey(th, tw)] else { throw TrainError.bundle("no decode program for a \(th)x\(tw) tile") }
            if current?.0 != name { current = nil; current = (name, try load(name)) }
            let out = try run(current!.1) { n, dtype, shape in
                guard n.hasPrefix(BundleContract.genWeightPrefix) else { return Generator.input(part, shape) }
                guard let w = weights else { throw TrainError.bundle("decode needs \(n) and the bundle has no decoder weights") }
                return try w.input(prefix + "." + n.dropFirst(BundleContract.genWeightPrefix.count), dtype: dtype, shape: shape)
            }[Generator.imageOutput]!
            return Tiling.Tile(c: out.shape[1].intValue, h: out.shape[2].intValue, w: out.shape[3].intValue, data: Generator.floats(out))
        }
    }

    /// The LoRA'd linears merged at the weights' bit width into `out` (once after training); only this bundle's
    /// LoRA (the manifest's lora_file keys and metadata; shapes that fit the frozen weights).
    func mergeLora(_ lora: URL, into out: URL) throws -> URL {
        let (tensors, meta) = try Safetensors.read(lora)
        guard Set(tensors.keys) == Set(loraRecord["keys"] as? [String] ?? [])
        else { throw TrainError.bundle("\(lora.path): a LoRA for another model or plan (its keys are not this bundle's)") }
        guard meta == (loraRecord["metadata"] as? [String: String] ?? [:])
        else { throw TrainError.bundle("\(lora.path): its metadata differs from this bundle's: a LoRA for another plan") }
        let base = try MappedWeights(root.appendingPathComponent((gen["weights"] as! [String: String])[precision]!))
        let scale = Float(gen["lora_scale"] as? Double ?? 1), group = gen["group_size"] as? Int ?? 32
        var merged: [String: (String, [Int], Data)] = [:]
        for module in Set(tensors.keys.map { $0.components(separatedBy: ".lora_")[0] }).sorted() {
            let a = tensors[module + ".lora_A.weight"]!, b = tensors[module + ".lora_B.weight"]!
            let name = String(module.dropFirst(BundleContract.loraKeyPrefix.count))
            var states: [String: RawTensor] = [:]
            for s in ["weight", "w_codes", "w_scale", "w_packed"] where base.contains(name + "." + s) { states[s] = try base.raw(name + "." + s) }
            guard let o = (states["weight"] ?? states["w_codes"] ?? states["w_packed"])?.shape[0], b.shape[0] == o
            else { throw TrainError.bundle("\(lora.path): \(module) does not fit this model's frozen weights") }
            for (s, t) in try LoraMerge.merge(states, a: try a.floats(), b: try b.floats(), rank: a.shape[0], scale: scale, group: group) {
                merged[name + "." + s] = t
            }
        }
        try MappedWeights.write(out, merged, metadata: ["format": "ditskip-edge-merged-lora", "precision": precision])
        return out
    }
}

/// A safetensors file mapped once (DSMappedFile); tensors are inputs at their offsets (no copy).
final class MappedWeights {
    let file: DSMappedFile
    private var entries: [String: [String: Any]] = [:]
    private let base: Int
    private let data: Data

    init(_ url: URL) throws {
        file = try DSMappedFile(path: url.path)
        data = try Data(contentsOf: url, options: .alwaysMapped)
        let n = Int(data.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) })
        guard let header = try JSONSerialization.jsonObject(with: data.subdata(in: 8..<(8 + n))) as? [String: Any]
        else { throw TrainError.bundle("\(url.path): bad safetensors header") }
        for (k, v) in header where k != "__metadata__" { entries[k] = v as? [String: Any] }
        base = 8 + n
    }

    func contains(_ key: String) -> Bool { entries[key] != nil }

    func input(_ key: String, dtype: String, shape: [Int]) throws -> DSMappedInput {
        guard let offs = entries[key]?["data_offsets"] as? [Int] else { throw TrainError.bundle("no weight \(key)") }
        return DSMappedInput(file: file, offset: UInt(base + offs[0]), dtype: dtype, shape: shape.map { NSNumber(value: $0) })
    }

    func raw(_ key: String) throws -> RawTensor {
        guard let e = entries[key], let offs = e["data_offsets"] as? [Int], let shape = e["shape"] as? [Int],
              let dtype = e["dtype"] as? String else { throw TrainError.bundle("no weight \(key)") }
        return RawTensor(dtype: dtype, shape: shape, bytes: data.subdata(in: (base + offs[0])..<(base + offs[1])))
    }

    /// safetensors with the widest dtypes first (float32 tensors stay 4-byte aligned), written atomically.
    static func write(_ url: URL, _ tensors: [String: (String, [Int], Data)], metadata: [String: String]) throws {
        let keys = tensors.keys.sorted { (tensors[$0]!.0 == "F32" ? 0 : 1, $0) < (tensors[$1]!.0 == "F32" ? 0 : 1, $1) }
        var header: [String: Any] = ["__metadata__": metadata]
        var offset = 0
        for k in keys { let t = tensors[k]!; header[k] = ["dtype": t.0, "shape": t.1, "data_offsets": [offset, offset + t.2.count]]; offset += t.2.count }
        var headerData = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys])
        headerData.append(contentsOf: [UInt8](repeating: 0x20, count: (8 - headerData.count % 8) % 8))
        var out = Data()
        var len = UInt64(headerData.count).littleEndian
        out.append(Data(bytes: &len, count: 8))
        out.append(headerData)
        for k in keys { out.append(tensors[k]!.2) }
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try out.write(to: url, options: .atomic)
    }
}
