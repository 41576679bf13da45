import Ditskip
import PhotosUI
import SwiftUI

/// UI over the native runtime core (the Swift package device_runtime/bindings/swift, actor DitskipSession): pick
/// photos, choose a bundle from Documents/ (copied in with Finder / Files), Train (the core trains it), watch loss and
/// memory, Stop. In Documents/runs/<bundle>/ the core writes checkpoint.safetensors, lora/ and summary.json, the app
/// device_run.json (per-step footprint; device_tests/handset/ios_pull_readout.sh pulls the folder); a second Train
/// resumes. The subject stage and generation are not in the core yet (issue 56): a model bundle's picked photos are
/// written upright to Documents/photos/ for the host's `python -m ditskip_edge.runtime personalize`, and Generate
/// says where to run it.
struct ContentView: View {
    @State private var picked: [PhotosPickerItem] = []
    @State private var bundles: [URL] = []
    @State private var selected: URL?
    @State private var status = "native core \(DitskipSession.version)"
    @State private var memory = MemoryProbe.read()
    @State private var session: DitskipSession?          // the bundle a run is training, for Stop

    private static let notInCoreStage = "not in this build: run the subject stage on the host (python -m "
        + "ditskip_edge.runtime personalize MODEL_BUNDLE --photos DIR) or wait for the native core's"
    private static let notInCoreGenerate = "not in this build: run generation on the host (python -m "
        + "ditskip_edge.runtime generate BUNDLE --lora RUN/lora --prompt ... --out PNG) or wait for the native core's"

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
                    Button("Stop") { session?.cancel() }.disabled(session == nil)
                    Button("Generate") { status = ContentView.notInCoreGenerate }
                }
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
        guard let root = selected else { return }
        if isModelBundle(root) { writePhotos(); return }
        let runDir = documents.appendingPathComponent("runs").appendingPathComponent(root.lastPathComponent)
        status = "verifying \(root.lastPathComponent) ..."
        Task { @MainActor in
            do {
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
            } catch {
                status = "failed: \(error)"                     // the core's one line (refusal, over budget, ...)
            }
        }
    }

    /// A model bundle needs the subject stage first, not in the core yet: the picked photos go upright to
    /// Documents/photos/, where the host's personalize can take them (Finder / Files).
    private func writePhotos() {
        let items = picked
        guard !items.isEmpty else { status = "a model bundle: pick the subject's photos, then Train.\n" + ContentView.notInCoreStage; return }
        let dir = documents.appendingPathComponent("photos")
        Task { @MainActor in
            do {
                try? FileManager.default.removeItem(at: dir)
                try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
                for (i, item) in items.enumerated() {
                    guard let data = try await item.loadTransferable(type: Data.self)
                    else { throw PhotoDecode.Failure("photo \(i + 1): cannot be read") }
                    try PhotoDecode.writeUpright(data, to: dir.appendingPathComponent(String(format: "photo-%02d.png", i + 1)))
                    status = "photo \(i + 1)/\(items.count) written"
                }
                status = "\(items.count) photos in Documents/photos\n" + ContentView.notInCoreStage
            } catch {
                status = "failed: \(error)"
            }
        }
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
