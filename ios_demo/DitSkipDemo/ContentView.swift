import Ditskip
import PhotosUI
import SwiftUI
import UIKit

/// UI over the native runtime core (the Swift package device_runtime/bindings/swift: actors DitskipSession and
/// DitskipStages): pick photos, choose a bundle from Documents/ (copied in with Finder / Files), Train, Generate,
/// watch progress and memory, Stop. Train on a model bundle runs the device's whole path in the core, as `ditskip-run
/// personalize` does: the picked photos (decoded upright by the platform) -> the subject stage (Documents/<bundle>-
/// subject; the photos never leave the phone) -> training; on a subject bundle, training alone. In
/// Documents/runs/<bundle>/ the core writes checkpoint.safetensors, lora/ and summary.json, the app device_run.json
/// (per-step footprint; device_tests/handset/ios_pull_readout.sh pulls the folder); a second Train resumes. Generate
/// draws the prompt with the bundle's generation programs and the run's LoRA, as `ditskip-run generate`.
struct ContentView: View {
    @State private var picked: [PhotosPickerItem] = []
    @State private var bundles: [URL] = []
    @State private var selected: URL?
    @State private var status = "native core \(DitskipSession.version)"
    @State private var memory = MemoryProbe.read()
    @State private var session: DitskipSession?          // the bundle a run is training, for Stop
    @State private var prompt = "a photo of sks dog on a beach"
    @State private var picture: UIImage?
    private let stages = DitskipStages()                  // the subject stage and generation, for Stop

    private var documents: URL { FileManager.default.urls(for: .documentDirectory, in: .userDomainMask)[0] }

    var body: some View {
        NavigationStack {
            Form {
                Section("Photos") {
                    PhotosPicker("Pick photos", selection: $picked, maxSelectionCount: 10, matching: .images)
                    Text("\(picked.count) picked (for a model bundle's subject stage)").font(.footnote)
                }
                Section("Bundle") {
                    Picker("Bundle", selection: $selected) {
                        ForEach(bundles, id: \.self) { Text($0.lastPathComponent).tag(Optional($0)) }
                    }
                    Button(session != nil ? "Training ..." : "Train") { start() }.disabled(session != nil || selected == nil)
                    Button("Stop") { session?.cancel(); stages.cancel() }
                    TextField("Prompt", text: $prompt)
                    Button("Generate") { generate() }.disabled(selected == nil)
                }
                if let picture { Section("Picture") { Image(uiImage: picture).resizable().scaledToFit() } }
                Section("Progress") { Text(status).font(.system(.body, design: .monospaced)) }
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
        bundles = items.filter { FileManager.default.fileExists(atPath: $0.appendingPathComponent("manifest.json").path) }
        selected = selected ?? bundles.first
    }

    private func start() {
        guard let model = selected else { return }
        let items = picked
        Task { @MainActor in
            do {
                var root = model
                if isModelBundle(model) {
                    root = subjectBundle(of: model)
                    if !items.isEmpty || !FileManager.default.fileExists(atPath: root.appendingPathComponent("manifest.json").path) {
                        guard !items.isEmpty else { status = "a model bundle: pick the subject's photos, then Train."; return }
                        let dir = try await writePhotos(items)
                        let stage = try await stages.personalize(modelDir: model, photosDir: dir,
                                                                 PersonalizeOptions(outDir: root, overwrite: true)) { name, done, total in
                            DispatchQueue.main.async { status = "\(name) \(done)/\(total)" }
                            return true
                        }
                        if stage.cancelled { status = "stopped: the subject stage continues on the next Train"; return }
                    }
                }
                try await train(root)
            } catch {
                status = "failed: \(error)"                     // the core's one line (refusal, over budget, ...)
            }
        }
    }

    @MainActor private func train(_ root: URL) async throws {
        let runDir = runDirectory(root)
        status = "verifying \(root.lastPathComponent) ..."
        let s = try DitskipSession(bundleDir: root)
        session = s
        defer { session = nil }
        let timeline = FootprintTimeline()
        let result = try await s.train(TrainOptions(runDir: runDir)) { step, total, loss in
            let m = MemoryProbe.read()
            timeline.rows.append([step, Int(m.footprintBytes), Int(m.availableBytes)])
            let line = String(format: "step %d/%d  loss %.4f", step, total, loss)
            DispatchQueue.main.async { status = line; memory = m }
            return true
        }
        timeline.write(to: runDir.appendingPathComponent("device_run.json"))
        status = result.cancelled ? "stopped: checkpoint in runs/\(root.lastPathComponent) (Train resumes)"
                                  : "LoRA written: runs/\(root.lastPathComponent)/lora"
    }

    /// Generate: the bundle's generation programs with the run's LoRA when there is one.
    private func generate() {
        guard let chosen = selected else { return }
        let root = isModelBundle(chosen) ? subjectBundle(of: chosen) : chosen
        let lora = runDirectory(root).appendingPathComponent("lora")
        let hasLora = FileManager.default.fileExists(atPath: lora.path)
        let out = documents.appendingPathComponent("generated.png")
        let text = prompt
        Task { @MainActor in
            do {
                let result = try await stages.generate(bundleDir: root, prompt: text, outPNG: out,
                                                       GenerateOptions(lora: hasLora ? lora : nil)) { name, done, total in
                    DispatchQueue.main.async { status = "\(name) \(done)/\(total)" }
                    return true
                }
                if result.cancelled { status = "stopped"; return }
                picture = UIImage(contentsOfFile: out.path)
                status = "wrote generated.png" + (hasLora ? " with the trained LoRA" : " (base model: no LoRA yet)")
            } catch {
                status = "failed: \(error)"
            }
        }
    }

    /// The picked photos, decoded upright by the platform, as PNGs in Documents/photos/ (what the subject stage reads).
    @MainActor private func writePhotos(_ items: [PhotosPickerItem]) async throws -> URL {
        let dir = documents.appendingPathComponent("photos")
        try? FileManager.default.removeItem(at: dir)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        for (i, item) in items.enumerated() {
            guard let data = try await item.loadTransferable(type: Data.self)
            else { throw PhotoDecode.Failure("photo \(i + 1): cannot be read") }
            try PhotoDecode.writeUpright(data, to: dir.appendingPathComponent(String(format: "photo-%02d.png", i + 1)))
            status = "photo \(i + 1)/\(items.count) read"
        }
        return dir
    }

    private func subjectBundle(of model: URL) -> URL {
        model.deletingLastPathComponent().appendingPathComponent(model.lastPathComponent + "-subject")
    }

    private func runDirectory(_ root: URL) -> URL {
        documents.appendingPathComponent("runs").appendingPathComponent(root.lastPathComponent)
    }

    /// Whether `root`'s manifest says it is a model bundle (no photos: the subject stage runs first).
    private func isModelBundle(_ root: URL) -> Bool {
        guard let data = try? Data(contentsOf: root.appendingPathComponent("manifest.json")),
              let m = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else { return false }
        return m["bundle_kind"] as? String == "model"
    }
}

/// Per training step, phys_footprint (what jetsam compares with the limit) and os_proc_available_memory(): the iOS
/// readout the core cannot take (no /proc), written beside the core's summary.json as device_run.json
/// (device_tests/handset/ios_pull_readout.sh pulls both). Appended on the training thread, read after `train` returns.
private final class FootprintTimeline: @unchecked Sendable {
    var rows: [[Int]] = []

    func write(to url: URL) {
        let doc: [String: Any] = ["timeline_fields": ["step", "footprint_bytes", "available_bytes"], "timeline": rows]
        if let data = try? JSONSerialization.data(withJSONObject: doc, options: [.prettyPrinted]) {
            try? data.write(to: url, options: .atomic)
        }
    }
}
