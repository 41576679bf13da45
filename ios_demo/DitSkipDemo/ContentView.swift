import PhotosUI
import SwiftUI

/// Pick photos, choose a bundle from Documents/ (copied in with Finder / Files), train, watch loss and memory, and
/// see the subject: a bundle compiled with --generation then draws the training prompt (or the user's own) with the
/// trained LoRA merged at the weights' bit width (Generator.swift), shown here and written to the run folder.
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

    private var documents: URL { FileManager.default.urls(for: .documentDirectory, in: .userDomainMask)[0] }

    var body: some View {
        NavigationStack {
            Form {
                Section("Photos") {
                    PhotosPicker("Pick photos", selection: $picked, maxSelectionCount: 10, matching: .images)
                    Text("\(picked.count) picked (the bundle's residual cache was computed for its own photos; "
                         + "this build trains from the cached latents)").font(.footnote)
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

    private func start() {
        guard let root = selected else { return }
        running = true
        let runDir = documents.appendingPathComponent("runs").appendingPathComponent(root.lastPathComponent)
        DispatchQueue.global(qos: .userInitiated).async {
            var report: [String: Any] = ["runtime": "executorch-ios", "bundle": root.lastPathComponent]
            do {
                let trainer = Trainer(bundle: try TrainingBundle(root: root), runDir: runDir)
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

    /// One picture with the run's LoRA (if trained), seed 0, the bundle's default steps and guidance.
    private func draw() {
        guard let root = selected else { return }
        running = true
        let runDir = documents.appendingPathComponent("runs").appendingPathComponent(root.lastPathComponent)
        let text = prompt
        DispatchQueue.global(qos: .userInitiated).async {
            do {
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
