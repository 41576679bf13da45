import CryptoKit
import Foundation

struct Sample { let index: Int; let photo: Int; let t: Float; let cropBox: [Int]; let noiseSeed: UInt64 }
struct InputSpec { let name: String; let shape: [Int]; let dtype: String }

/// Where a sample's encoded cache entry (["x0", "<residual>.<part>", ...], coded as a stored cache holds it) comes
/// from: the stored residual cache (StoredEntries), or, for an x0-only or cache-free bundle, computed at each step
/// (CacheFreeEntries.swift, the twin of CacheFreeEntries.kt and runtime/subject.py CacheFreeEntries).
protocol EntrySource {
    /// The entry's parts: name -> (contract dtype, shape).
    var parts: [String: (String, [Int])] { get }
    func read(_ s: Sample) throws -> [String: RawTensor]
}

/// A stored bundle's entries: its residual cache, read entry by entry (SHA-256 checked).
final class StoredEntries: EntrySource {
    let cache: ResidualCache
    init(_ cache: ResidualCache) { self.cache = cache }
    var parts: [String: (String, [Int])] { cache.layout.mapValues { ($0.dtype, $0.shape) } }
    func read(_ s: Sample) throws -> [String: RawTensor] { try cache.read(s.index) }
}

/// A bundle as the device reads it, through the contract only (docs/bundle_contract.json; names in BundleContract).
/// `subject_stage.cache_mode`: "stored" (the residual cache gives the entries), "x0-only" (the cache holds x0 alone) or
/// "cache-free" (no cache): those two compute each step's entry (CacheFreeEntries.swift), handed in with useEntries
/// before training; their entry inputs are checked against its layout then.
final class TrainingBundle {
    let root: URL
    /// The manifest's own digest (its first line), checked against every byte after that line before any field is
    /// read (contract `bundle.manifest_digest`): an edited or corrupt manifest is refused.
    let manifestSha256: String
    let manifest: [String: Any]
    let samples: [Sample]
    let steps: Int
    let gradAccum: Int
    let program: [String: Any]
    let inputs: [InputSpec]
    let trainable: [String: String]            // program parameter name -> LoRA file key
    /// The text conditioning as stored: one row (the prompt's), or with per-photo captions one row per photo.
    let cond: [String: RawTensor]
    /// subject_stage.text_rows == per_photo: sample s trains with row s.photo of cond (condFor).
    let perPhotoText: Bool
    let cacheMode: String
    /// stored: the residual cache; x0-only: the cache of x0 alone; cache-free: none.
    let cache: ResidualCache?
    /// The entries the training step takes: the stored cache's, or those handed in with useEntries.
    private(set) var entries: EntrySource?

    init(root: URL) throws {
        self.root = root
        let raw = try Data(contentsOf: root.appendingPathComponent(BundleContract.manifestFile))
        guard let newline = raw.firstIndex(of: 0x0A),
              let head = String(data: raw[raw.startIndex...newline], encoding: .utf8),
              let match = head.range(of: "^\\{\"\(BundleContract.manifestDigestField)\": \"[0-9a-f]{64}\",\n$",
                                     options: .regularExpression)
        else { throw TrainError.bundle("\(root.path)/manifest.json: first line does not carry \(BundleContract.manifestDigestField)") }
        let digest = String(head[match].dropFirst(BundleContract.manifestDigestField.count + 6).prefix(64))
        guard TrainingBundle.sha256Hex(raw[raw.index(after: newline)...]) == digest
        else { throw TrainError.bundle("\(root.path)/manifest.json: contents do not match \(BundleContract.manifestDigestField) (edited or corrupt)") }
        manifestSha256 = digest
        let m = try JSONSerialization.jsonObject(with: raw)
        guard let manifest = m as? [String: Any] else { throw TrainError.bundle("manifest.json is not an object") }
        guard manifest["format"] as? String == BundleContract.bundleFormat,
              manifest["format_version"] as? Int == BundleContract.bundleFormatVersion
        else { throw TrainError.bundle("\(root.path)/manifest.json: not a \(BundleContract.bundleFormat) v\(BundleContract.bundleFormatVersion) bundle") }
        self.manifest = manifest
        guard manifest[BundleContract.bundleKindField] as? String != BundleContract.modelBundleKind
        else { throw TrainError.bundle("\(root.path): a model bundle (no photos, no residual cache): run the subject stage on it first (pick photos and tap Train: SubjectBundle.write, or python -m ditskip_edge.runtime personalize)") }
        cacheMode = (manifest["subject_stage"] as? [String: Any])?["cache_mode"] as? String ?? BundleContract.storedMode
        let modes = [BundleContract.storedMode, BundleContract.x0OnlyMode, BundleContract.cacheFreeMode]
        guard modes.contains(cacheMode)
        else { throw TrainError.bundle("\(root.path)/manifest.json: subject_stage.cache_mode '\(cacheMode)', expected one of \(modes.joined(separator: ", ")) (a bundle of another version: write it again with this version's subject stage)") }
        guard let subject = manifest["subject_stage"] as? [String: Any],
              let schedulePath = subject["schedule"] as? String, let textPath = subject["text_conditioning"] as? String
        else { throw TrainError.bundle("manifest.json: subject_stage incomplete") }
        let cachePath = cacheMode == BundleContract.cacheFreeMode ? nil : subject["cache"] as? String
        guard cachePath != nil || cacheMode == BundleContract.cacheFreeMode
        else { throw TrainError.bundle("\(root.path)/manifest.json: a \(cacheMode) bundle without its cache (subject_stage.cache)") }
        let schedule = try JSONSerialization.jsonObject(with: Data(contentsOf: root.appendingPathComponent(schedulePath))) as! [String: Any]
        guard schedule["sample_fields"] as? [String] == BundleContract.sampleFields
        else { throw TrainError.bundle("schedule.json: sample_fields are not \(BundleContract.sampleFields)") }
        samples = (schedule["samples"] as! [[Any]]).map { r in
            Sample(index: r[0] as! Int, photo: r[1] as! Int, t: Float(r[2] as! Double), cropBox: r[3] as! [Int],
                   noiseSeed: (r[4] as! NSNumber).uint64Value)
        }
        let config = schedule["config"] as! [String: Any]
        steps = config["steps"] as! Int
        gradAccum = config["grad_accum"] as! Int
        cond = try Safetensors.read(root.appendingPathComponent(textPath)).tensors
        let textRows = subject[BundleContract.textRowsField] as? String ?? BundleContract.sharedTextRows
        guard textRows == BundleContract.sharedTextRows || textRows == BundleContract.perPhotoTextRows
        else { throw TrainError.bundle("\(root.path)/manifest.json: subject_stage.\(BundleContract.textRowsField) '\(textRows)', expected \(BundleContract.sharedTextRows) or \(BundleContract.perPhotoTextRows)") }
        perPhotoText = textRows == BundleContract.perPhotoTextRows
        let nRows = perPhotoText ? (subject["photos"] as? [String] ?? []).count : 1
        for (k, t) in cond where t.shape.first != nRows {
            throw TrainError.bundle("\(root.path): text conditioning \(k) has shape \(t.shape), expected \(nRows) row(s) (\(textRows))")
        }
        cache = try cachePath.map { try ResidualCache(dir: root.appendingPathComponent($0)) }
        if let cache, let cachePath {
            guard cache.count == samples.count
            else { throw TrainError.bundle("\(cachePath): \(cache.count) cache entries for \(samples.count) samples") }
            guard cacheMode != BundleContract.x0OnlyMode || Set(cache.layout.keys) == [BundleContract.x0Key]
            else { throw TrainError.bundle("\(root.path): an \(BundleContract.x0OnlyMode) bundle whose cache holds \(cache.layout.keys.sorted()), not x0 alone") }
        }

        let programs = manifest[BundleContract.programsField] as? [[String: Any]] ?? []
        guard let train = programs.first(where: { $0["name"] as? String == BundleContract.etTrainStep
                                                  && $0["runtime"] as? String == BundleContract.etRuntime })
        else { throw TrainError.bundle("manifest.json: no executorch train_step program (compile with --runtime executorch)") }
        program = train
        inputs = (train[BundleContract.etInputsField] as! [[String: Any]]).map {
            InputSpec(name: $0["name"] as! String, shape: $0["shape"] as! [Int], dtype: $0["dtype"] as? String ?? "float32")
        }
        trainable = train[BundleContract.etTrainableField] as! [String: String]
        try checkInputOrder(inputs.map(\.name))
        if cacheMode == BundleContract.storedMode { try useEntries(StoredEntries(cache!)) }
    }

    /// The training step's entries from `source` (an x0-only or cache-free bundle: CacheFreeEntries), checked against
    /// the program's entry inputs first.
    func useEntries(_ source: EntrySource) throws {
        try checkEntryInputs(source.parts)
        entries = source
    }

    /// The entries, or the one-line refusal of an x0-only / cache-free bundle given none.
    func requireEntries() throws -> EntrySource {
        guard let entries else { throw TrainError.bundle("\(root.path): a \(cacheMode) bundle computes each step's cache entry with its forward programs: give it its CacheFreeEntries (TrainingBundle.useEntries) before training") }
        return entries
    }

    /// entry.<part> inputs are exactly the cache layout's parts without x0, with its dtypes and shapes; the other
    /// inputs are float32 (contract `step_inputs.dtype_rule`).
    private func checkEntryInputs(_ layout: [String: (String, [Int])]) throws {
        let parts = layout.keys.filter { $0 != BundleContract.x0Key }.sorted()
        let names = inputs.map(\.name).filter { $0.hasPrefix(BundleContract.entryPrefix) }
            .map { String($0.dropFirst(BundleContract.entryPrefix.count)) }
        guard names == parts else { throw TrainError.bundle("program entry inputs \(names) differ from the cache layout's parts \(parts)") }
        for spec in inputs {
            if spec.name.hasPrefix(BundleContract.entryPrefix) {
                let p = layout[String(spec.name.dropFirst(BundleContract.entryPrefix.count))]!
                guard spec.dtype == p.0, spec.shape == p.1
                else { throw TrainError.bundle("input \(spec.name): program wants \(spec.dtype) \(spec.shape), cache stores \(p.0) \(p.1)") }
            } else if spec.dtype != BundleContract.stepInputDtype {
                throw TrainError.bundle("input \(spec.name): \(spec.dtype), expected \(BundleContract.stepInputDtype)")
            }
        }
    }

    var programURL: URL { root.appendingPathComponent(program[BundleContract.etProgramField] as! String) }
    /// The program's .ptd (its frozen weights; the entry's `data`), nil when the weights are inside the .pte.
    var programDataURL: URL? {
        (program[BundleContract.etDataField] as? [String])?.first.map { root.appendingPathComponent($0) }
    }

    var loraMetadata: [String: String] {
        ((manifest[BundleContract.loraFileField] as? [String: Any])?["metadata"] as? [String: String]) ?? ["format": "pt"]
    }

    static func sha256Hex<D: DataProtocol>(_ data: D) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    /// What a checkpoint belongs to (contract `checkpoint.identity`): this runtime, this program's files, this
    /// manifest (which covers the schedule, the cache codec, the LoRA spec and the optimizer).
    var checkpointIdentity: String {
        let files = manifest["files"] as! [String: [String: Any]]
        let paths = [program[BundleContract.etProgramField] as! String] + (program[BundleContract.etDataField] as? [String] ?? [])
        let programSha = paths.map { files[$0]!["sha256"] as! String }.joined(separator: "+")
        let text = "\(BundleContract.checkpointIdentityPrefix)\n\(BundleContract.etRuntime)\n\(programSha)\n\(manifestSha256)"
        return TrainingBundle.sha256Hex(Data(text.utf8))
    }

    /// x0, noise, t, cond.* sorted, entry.* sorted (contract `step_inputs`): refuse a program that differs.
    private func checkInputOrder(_ names: [String]) throws {
        let fixed = BundleContract.fixedInputs
        let conds = names.filter { $0.hasPrefix(BundleContract.condPrefix) }.sorted()
        let entries = names.filter { $0.hasPrefix(BundleContract.entryPrefix) }.sorted()
        guard names == fixed + conds + entries else { throw TrainError.bundle("program inputs \(names) are not in contract order") }
    }

    /// The text conditioning photo `photo`'s samples train with: cond, or with per-photo captions its row.
    func condFor(_ photo: Int) throws -> [String: RawTensor] {
        guard perPhotoText else { return cond }
        return try cond.mapValues { try $0.row(photo) }
    }

    func samplesForStep(_ step: Int) -> ArraySlice<Sample> { samples[(step * gradAccum)..<((step + 1) * gradAccum)] }

    /// One sample's inputs in program order: x0 from the cache entry, noise from the portable RNG, t, text, and the
    /// cache entry's stored parts (SHA-256 checked; int8 / uint8 / float32 as the program's spec says; x0-only and
    /// cache-free: the entry computed now, coded as a stored cache would hold it).
    func stepInputs(_ s: Sample) throws -> [DSTensorInput] {
        let entry = try requireEntries().read(s)
        guard let x0 = try entry[BundleContract.x0Key]?.floats() else { throw TrainError.bundle("cache entry \(s.index) has no x0") }
        let cond = try condFor(s.photo)
        return try inputs.map { spec in
            let values: [Float]
            switch spec.name {
            case "x0": values = x0
            case "noise": values = PortableRng.normal(seed: s.noiseSeed, count: x0.count)
            case "t": values = [s.t]
            case let n where n.hasPrefix(BundleContract.condPrefix):
                values = try cond[String(n.dropFirst(BundleContract.condPrefix.count))]!.floats()
            default:
                guard let part = entry[String(spec.name.dropFirst(BundleContract.entryPrefix.count))],
                      part.shape == spec.shape, part.dtype == ResidualCache.safetensorsDtype[spec.dtype]
                else { throw TrainError.bundle("input \(spec.name): not in the cache entry as \(spec.dtype) \(spec.shape)") }
                return DSTensorInput(bytes: part.bytes, dtype: spec.dtype, shape: spec.shape.map { NSNumber(value: $0) })
            }
            guard spec.dtype == BundleContract.stepInputDtype, values.count == spec.shape.reduce(1, *)
            else { throw TrainError.bundle("input \(spec.name): \(values.count) values for \(spec.shape) \(spec.dtype)") }
            return DSTensorInput(bytes: values.withUnsafeBufferPointer { Data(buffer: $0) }, dtype: spec.dtype,
                                 shape: spec.shape.map { NSNumber(value: $0) })
        }
    }
}
