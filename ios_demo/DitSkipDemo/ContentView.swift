import PhotosUI
import SwiftUI
import UniformTypeIdentifiers

/// Pick photos, choose a bundle from Documents/ (copied in with Finder / Files), train, watch loss and memory, and
/// see the subject. A model bundle (no photos: `ditskip-edge compile` without --images) first runs the subject stage
/// here on the picked photos (decoded, normalised, residual cache with progress, resumable: `subjectStage`) and trains
/// the subject bundle it writes beside it in Documents/. After training, a bundle compiled with --generation draws
/// the training prompt (or the user's own) with the trained LoRA merged at the weights' bit width (Generator.swift), shown here and written to the run folder.
/// Writes Documents/runs/<bundle>/device_run.json (losses, per-step footprint and os_proc_available_memory, LoRA
/// path): the iOS handset measurement reads that file (device_tests/handset/ios_pull_readout.sh).
struct ContentView: View {
    @State private var picked: [PhotosPickerItem] = []
    @State private var bundles: [URL] = []
    @State private var selected: URL?
    @State private var status = PortableRng.selfCheck() ? "RNG self-check ok" : "RNG self-check FAILED"
    @State private var memory = MemoryProbe.read()
    @State private var running = false
    @State private var prompt = ""
    @State private var picture: CGImage?
    @State private var lastStage: (model: URL, subject: URL)?   // the subject bundle a stage wrote this session

    private var documents: URL { FileManager.default.urls(for: .documentDirectory, in: .userDomainMask)[0] }

    var body: some View {
        NavigationStack {
            Form {
                Section("Photos") {
                    PhotosPicker("Pick photos", selection: $picked, maxSelectionCount: 10, matching: .images)
                    Text("\(picked.count) picked (a model bundle: the subject stage runs on them here; a subject "
                         + "bundle: its residual cache was computed for its own photos, this build trains from the "
                         + "cached latents)").font(.footnote)
                }
                Section("Bundle") {
                    Picker("Bundle", selection: $selected) {
                        ForEach(bundles, id: \.self) { Text($0.lastPathComponent).tag(Optional($0)) }
                    }
                    Button(running ? "Training ..." : "Train") { start() }.disabled(running || selected == nil)
                }
                Section("Progress") { Text(status).font(.system(.body, design: .monospaced)) }
                Section("Picture") {
                    TextField("prompt (default: the training prompt)", text: $prompt)
                    Button("Generate") { draw() }.disabled(running || selected == nil)
                    if let picture { Image(decorative: picture, scale: 1).interpolation(.none).resizable().scaledToFit() }
                }
                Section("Memory") {
                    Text("available (os_proc_available_memory): \(memory.availableBytes >> 20) MiB")
                    Text("footprint (phys_footprint): \(memory.footprintBytes >> 20) MiB")
                }
            }
            .navigationTitle("DiT-BlockSkip")
            .onAppear(perform: scan)
        }
    }

    private func scan() {
        let items = (try? FileManager.default.contentsOfDirectory(at: documents, includingPropertiesForKeys: nil)) ?? []
        bundles = items.filter { FileManager.default.fileExists(atPath: $0.appendingPathComponent(BundleContract.manifestFile).path) }
        selected = selected ?? bundles.first
    }

    /// Train: a subject bundle as before; a model bundle (manifest bundle_kind = modelBundleKind) first goes through the
    /// subject stage on the phone (`subjectStage`) and the subject bundle it wrote is trained the same way.
    private func start() {
        guard let root = selected else { return }
        running = true
        guard isModelBundle(root) else { train(root, stage: nil); return }
        let items = picked
        Task { @MainActor in
            if let done = await subjectStage(root, items) { train(done.subject, stage: done.report) } else { running = false }
        }
    }

    /// Training, as it always was for a subject bundle; `stage`: the subject stage's report when it wrote `root`.
    private func train(_ root: URL, stage: [String: Any]?) {
        let runDir = documents.appendingPathComponent("runs").appendingPathComponent(root.lastPathComponent)
        DispatchQueue.global(qos: .userInitiated).async {
            var report: [String: Any] = ["runtime": "executorch-ios", "bundle": root.lastPathComponent]
            if let stage { report["subject_stage"] = stage }
            do {
                let bundle = try TrainingBundle(root: root)
                if bundle.cacheMode != BundleContract.storedMode {
                    // x0-only / cache-free: each step's entry computed with the bundle's forward programs (refused
                    // here in one line: lowrank codec, missing programs, weights in a .ptd)
                    try bundle.useEntries(CacheFreeEntries(bundle, runner: try EtForwardRunner(root: root, manifest: bundle.manifest)))
                }
                report["cache_mode"] = bundle.cacheMode
                let trainer = Trainer(bundle: bundle, runDir: runDir)
                let lora = try trainer.train { p in
                    DispatchQueue.main.async {
                        status = String(format: "step %d/%d  loss %.4f", p.step, p.total, p.loss)
                        memory = p.memory
                    }
                }
                report["status"] = "ok"
                report["lora"] = lora.path
                report["losses"] = trainer.losses.map { Double($0) }
                report["timeline_fields"] = ["step", "footprint_bytes", "available_bytes"]
                report["timeline"] = trainer.timeline.map { [$0.0, Int($0.1.footprintBytes), Int($0.1.availableBytes)] }
                DispatchQueue.main.async { status = "LoRA written: \(lora.lastPathComponent)" }
                if trainer.bundle.manifest[BundleContract.genField] != nil { DispatchQueue.main.async { draw() } }
            } catch {
                report["status"] = "error"
                report["message"] = String(describing: error)
                DispatchQueue.main.async { status = "failed: \(error)" }
            }
            let end = MemoryProbe.read()
            report["footprint_bytes_at_end"] = Int(end.footprintBytes)
            report["available_bytes_at_end"] = Int(end.availableBytes)
            try? FileManager.default.createDirectory(at: runDir, withIntermediateDirectories: true)
            if let data = try? JSONSerialization.data(withJSONObject: report, options: [.prettyPrinted]) {
                try? data.write(to: runDir.appendingPathComponent("device_run.json"), options: .atomic)
            }
            DispatchQueue.main.async { running = false }
        }
    }

    /// Whether `root` holds a model bundle (the subject stage runs first); an unreadable manifest is not: TrainingBundle
    /// then says what is wrong, as before.
    private func isModelBundle(_ root: URL) -> Bool {
        guard let data = try? Data(contentsOf: root.appendingPathComponent(BundleContract.manifestFile)),
              let m = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else { return false }
        return m[BundleContract.bundleKindField] as? String == BundleContract.modelBundleKind
    }

    private static let subjectSuffix = "-subject-"

    /// The subject bundle the stage writes for `model` and these photos: beside it in Documents/, named by the run
    /// identity (model bundle, photos' names and hashes, prompt, mode), so other photos get another folder and the
    /// same photos find their finished bundle or their interrupted `.<name>.partial`.
    private func subjectBundle(for model: URL, identity: String) -> URL {
        model.deletingLastPathComponent().appendingPathComponent("\(model.lastPathComponent)\(ContentView.subjectSuffix)\(identity.prefix(12))")
    }

    /// The latest subject bundle a stage wrote for `model` (finished: its manifest is there), or nil.
    private func latestSubjectBundle(_ model: URL, last: (model: URL, subject: URL)?) -> URL? {
        let fm = FileManager.default
        let manifest = { (u: URL) in u.appendingPathComponent(BundleContract.manifestFile) }
        if let last, last.model.standardizedFileURL == model.standardizedFileURL, fm.fileExists(atPath: manifest(last.subject).path) {
            return last.subject
        }
        let items = (try? fm.contentsOfDirectory(at: model.deletingLastPathComponent(), includingPropertiesForKeys: nil)) ?? []
        let mine = items.filter { $0.lastPathComponent.hasPrefix(model.lastPathComponent + ContentView.subjectSuffix)
                                  && fm.fileExists(atPath: manifest($0).path) }
        func modified(_ u: URL) -> Date { ((try? fm.attributesOfItem(atPath: manifest(u).path))?[.modificationDate] as? Date) ?? .distantPast }
        return mine.max { modified($0) < modified($1) }
    }

    /// A refusal's one line (the message the code wrote); anything else as Swift describes it.
    private func oneLine(_ error: Error) -> String {
        if let e = error as? TrainError { switch e { case .bundle(let s), .runtime(let s): return s } }
        return String(describing: error)
    }

    /// The subject stage on the phone (runtime/subject.py personalize, stored mode): the picked photos' bytes loaded
    /// from the picker, decoded and drawn upright (PhotoDecode: UIImage / CGImage, orientation applied), normalised to
    /// the model bundle's s_max_px (PhotoNormalise), the residual cache computed with the bundle's encode / embed /
    /// block programs (ModelBundle.writeCache) inside the subject bundle SubjectBundle.write assembles, progress on
    /// screen. Killed part-way, it leaves `.<name>.partial`: the next tap with the same photos continues after the last
    /// journalled cache entry. A finished subject bundle for the same photos is trained as it is (training resumes from
    /// its checkpoint); with no photos picked, the latest one the stage wrote is. Returns the subject bundle and the
    /// stage's report for device_run.json, or nil after showing the refusal in one line.
    @MainActor
    private func subjectStage(_ model: URL, _ items: [PhotosPickerItem]) async -> (subject: URL, report: [String: Any])? {
        let last = lastStage
        if items.isEmpty, let earlier = latestSubjectBundle(model, last: last) {
            status = "no photos picked: training \(earlier.lastPathComponent), the subject bundle an earlier stage wrote"
            return (earlier, ["model_bundle": model.lastPathComponent, "subject_bundle": earlier.lastPathComponent,
                            "status": "earlier"])
        }
        var files: [(data: Data, ext: String)] = []
        do {
            for (i, item) in items.enumerated() {
                guard let data = try await item.loadTransferable(type: Data.self)
                else { throw TrainError.bundle("photo \(i + 1): cannot be read") }
                files.append((data, item.supportedContentTypes.first?.preferredFilenameExtension ?? "jpg"))
                status = "subject stage: photo \(i + 1)/\(items.count) loaded"
            }
        } catch {
            status = "subject stage failed: \(oneLine(error))"
            return nil
        }
        let result: Result<(URL, [String: Any]), Error> = await withCheckedContinuation { done in
            DispatchQueue.global(qos: .userInitiated).async {
                done.resume(returning: Result { try runStage(model, files) })
            }
        }
        switch result {
        case .success(let (subject, report)):
            lastStage = (model, subject)
            scan()
            return (subject, report)
        case .failure(let error):
            status = "subject stage failed: \(oneLine(error))"
            return nil
        }
    }

    /// The stage's work, off the main thread; progress posted to the main queue.
    private func runStage(_ model: URL, _ files: [(data: Data, ext: String)]) throws -> (URL, [String: Any]) {
        func post(_ text: String) { DispatchQueue.main.async { status = text; memory = MemoryProbe.read() } }
        post("subject stage: reading the model bundle ...")
        let bundle = try ModelBundle(root: model)
        // model_bundle.min_photos, checked before the model bundle's files are hashed (ModelBundle.writeCache checks it
        // again); names in constants: a model bundle's fields, and tests/test_bundle_contract.py's fixtures are subject bundles
        let (section, field) = ("model_bundle", "min_photos")
        let minPhotos = bundle.manifest[section]?[field]?.intValue ?? 1
        guard files.count >= minPhotos else { throw TrainError.bundle("\(files.count) photos: this model bundle needs at least \(minPhotos)") }
        // the programs' weights must be in the .pte (a mapped .ptd is refused here, in one line, before any work)
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: model.appendingPathComponent(BundleContract.manifestFile)))
        let runner = try EtForwardRunner(root: model, manifest: object as? [String: Any] ?? [:])
        let cfg = try bundle.scheduleConfig()
        let photos = try PhotoDecode.load(files, cfg: cfg) { i, n in post("subject stage: photo \(i)/\(n) decoded and normalised") }
        let promptIndex = 0                                              // personalize's default: the first prompt
        let identity = bundle.runIdentity(photos, prompt: try bundle.prompts()[promptIndex].0, mode: BundleContract.storedMode)
        let out = subjectBundle(for: model, identity: identity)
        var report: [String: Any] = ["model_bundle": model.lastPathComponent, "subject_bundle": out.lastPathComponent,
                                     "photos": photos.count]
        if FileManager.default.fileExists(atPath: out.appendingPathComponent(BundleContract.manifestFile).path) {
            post("subject stage: \(out.lastPathComponent) is already written for these photos: training it")
            report["status"] = "already written"
            return (out, report)
        }
        let journal = SubjectBundle.workDir(for: out).appendingPathComponent("\(SubjectBundle.cacheDir)/\(CacheWriter.journalFile)")
        let resuming = FileManager.default.fileExists(atPath: journal.path)
        post("subject stage: verifying the model bundle, writing the photos" + (resuming ? " (continuing an interrupted run) ..." : " ..."))
        var computed = 0
        let t0 = Date()
        guard try SubjectBundle.write(model: bundle, photos: photos, promptIndex: promptIndex, out: out, png: CGPngWriter(),
                                      overwrite: true, resume: true, runner: runner, progress: { done, total in
            computed += 1
            post("subject stage: cache entry \(done)/\(total)" + (computed < done ? " (\(done - computed) resumed)" : ""))
        }) != nil else { throw TrainError.runtime("subject stage stopped before the end") }
        report["status"] = "ok"
        report["computed_entries"] = computed
        report["seconds"] = Date().timeIntervalSince(t0)
        report["footprint_bytes_at_end"] = Int(MemoryProbe.read().footprintBytes)
        return (out, report)
    }

    /// One picture with the run's LoRA (if trained), seed 0, the bundle's default steps and guidance.
    private func draw() {
        guard let given = selected else { return }
        running = true
        let text = prompt
        let last = lastStage
        DispatchQueue.global(qos: .userInitiated).async {
            do {
                // a model bundle: the subject bundle its stage wrote (none yet: TrainingBundle refuses it in one line)
                let root = isModelBundle(given) ? (latestSubjectBundle(given, last: last) ?? given) : given
                let runDir = documents.appendingPathComponent("runs").appendingPathComponent(root.lastPathComponent)
                let bundle = try TrainingBundle(root: root)
                let gen = try Generator(bundle: bundle)
                let subject = bundle.manifest["subject_stage"] as? [String: Any]
                let p = text.isEmpty ? (subject?["prompt"] as? String ?? "") : text
                let lora = runDir.appendingPathComponent("lora").appendingPathComponent(BundleContract.loraFile)
                let merged = FileManager.default.fileExists(atPath: lora.path)
                    ? try gen.mergeLora(lora, into: runDir.appendingPathComponent("lora/merged/\(gen.precision).safetensors")) : nil
                let sampler = gen.gen["sampler"] as? [String: Any] ?? [:]
                let rgb = try gen.generate(prompt: p, seed: 0, steps: sampler["default_steps"] as? Int ?? 20,
                                           guidance: Float(sampler["guidance_scale"] as? Double ?? 3), mergedLora: merged) { i, n in
                    DispatchQueue.main.async { status = "generating: step \(i)/\(n)" }
                }
                let side = Int(Double(rgb.count / 3).squareRoot().rounded())
                var rgba = [UInt8](repeating: 255, count: side * side * 4)
                for px in 0..<(side * side) { for c in 0..<3 { rgba[4 * px + c] = UInt8((rgb[3 * px + c] * 255).rounded()) } }
                let provider = CGDataProvider(data: Data(rgba) as CFData)!
                let image = CGImage(width: side, height: side, bitsPerComponent: 8, bitsPerPixel: 32, bytesPerRow: 4 * side,
                                    space: CGColorSpaceCreateDeviceRGB(), bitmapInfo: CGBitmapInfo(rawValue: CGImageAlphaInfo.noneSkipLast.rawValue),
                                    provider: provider, decode: nil, shouldInterpolate: false, intent: .defaultIntent)
                DispatchQueue.main.async { picture = image; status = "\"\(p)\"" + (merged == nil ? " (no LoRA yet)" : ""); running = false }
            } catch {
                DispatchQueue.main.async { status = "generation failed: \(error)"; running = false }
            }
        }
    }
}
