import Foundation

/// The training loop on the phone, line for line the runtime package's loop (ditskip_edge/runtime/loop.py) with the
/// ExecuTorch step adapter (runtime/executorch.py): one forward-backward on the first sample (the named parameters
/// exist only after it), resume from RUN/checkpoint.safetensors when its identity is this run's, then per step the
/// scheduled samples' gradients averaged over grad_accum through the Objective-C++ bridge, AdamW in place on the
/// runtime's parameters, an atomic checkpoint after every step, the LoRA at the end. Entries: the residual cache's
/// (stored), or CacheFreeEntries' (x0-only, cache-free: computed each step; TrainingBundle.useEntries).
final class Trainer {
    struct Progress { let step: Int; let total: Int; let loss: Float; let memory: MemoryProbe.Reading }

    let bundle: TrainingBundle
    let runDir: URL
    private(set) var losses: [Float] = []
    private(set) var timeline: [(Int, MemoryProbe.Reading)] = []

    init(bundle: TrainingBundle, runDir: URL) { self.bundle = bundle; self.runDir = runDir }

    func train(onProgress: (Progress) -> Void) throws -> URL {
        guard PortableRng.selfCheck() else { throw TrainError.runtime("portable RNG does not reproduce the host's noise") }
        _ = try bundle.requireEntries()   // x0-only / cache-free: CacheFreeEntries handed in (useEntries), else one line
        try FileManager.default.createDirectory(at: runDir, withIntermediateDirectories: true)
        let o = bundle.manifest["optimizer"] as! [String: Any]
        let betas = o["betas"] as! [Double]
        let lr = o["lr"] as! Double
        let adamw = AdamW(lr: lr, beta1: betas[0], beta2: betas[1], eps: o["eps"] as! Double,
                          weightDecay: o["weight_decay"] as! Double)
        let lrSchedule = o[BundleContract.lrScheduleField] as? String ?? "constant"      // absent: bundles before v8
        _ = try AdamW.lrAt(lr: lr, schedule: lrSchedule, step: 0, steps: bundle.steps)   // unknown: refused up front
        let module = try DSTrainingModule(path: bundle.programURL.path, dataPath: bundle.programDataURL?.path)
        let method = BundleContract.etMethod
        _ = try module.forwardBackward(method, inputs: try bundle.stepInputs(bundle.samples[0]))   // prepare
        let views = try module.namedParameters(method)
        let params = views.mapValues { $0.data }
        let counts = views.mapValues { $0.count }
        let shapes = views.mapValues { $0.shape.map(\.intValue) }
        let start = try resume(params, counts, adamw)
        for step in start..<bundle.steps {
            var grads: [String: [Float]] = [:]
            var stepLoss: Float = 0
            for s in bundle.samplesForStep(step) {
                let loss = try module.forwardBackward(method, inputs: try bundle.stepInputs(s))
                stepLoss += loss.floatValue / Float(bundle.gradAccum)
                for (name, g) in try module.namedGradients(method) {
                    var acc = grads[name] ?? [Float](repeating: 0, count: g.count)
                    for i in 0..<g.count { acc[i] += g.data[i] / Float(bundle.gradAccum) }
                    grads[name] = acc
                }
            }
            adamw.lr = try AdamW.lrAt(lr: lr, schedule: lrSchedule, step: step, steps: bundle.steps)
            adamw.step(params: params, counts: counts, grads: grads)
            losses.append(stepLoss)
            try saveCheckpoint(params, counts, adamw, step + 1)
            let mem = MemoryProbe.read()
            timeline.append((step + 1, mem))
            onProgress(Progress(step: step + 1, total: bundle.steps, loss: stepLoss, memory: mem))
        }
        return try saveLora(params, counts, shapes)
    }

    private var checkpointURL: URL { runDir.appendingPathComponent(BundleContract.checkpointFile) }

    private func resume(_ params: [String: UnsafeMutablePointer<Float>], _ counts: [String: Int], _ adamw: AdamW) throws -> Int {
        guard FileManager.default.fileExists(atPath: checkpointURL.path) else { return 0 }
        let (ck, meta) = try Safetensors.read(checkpointURL)
        guard meta["identity"] == bundle.checkpointIdentity
        else { throw TrainError.bundle("\(checkpointURL.path) belongs to another bundle, program or schedule: delete it") }
        var m: [String: [Float]] = [:], v: [String: [Float]] = [:]
        for (name, p) in params {
            let saved = try ck["param/\(name)"]!.floats()
            for i in 0..<counts[name]! { p[i] = saved[i] }
            m[name] = try ck["m/\(name)"]!.floats()
            v[name] = try ck["v/\(name)"]!.floats()
        }
        let step = Int(meta["step"]!)!
        adamw.restore(step: Int(meta["optimizer_steps"]!)!, m: m, v: v)
        losses = (try JSONSerialization.jsonObject(with: Data(meta["losses"]!.utf8)) as! [Double]).map { Float($0) }
        return step
    }

    private func saveCheckpoint(_ params: [String: UnsafeMutablePointer<Float>], _ counts: [String: Int], _ adamw: AdamW, _ step: Int) throws {
        var t: [String: (shape: [Int], values: [Float])] = [:]
        for (name, p) in params {
            let n = counts[name]!
            t["param/\(name)"] = ([n], Array(UnsafeBufferPointer(start: p, count: n)))
            t["m/\(name)"] = ([n], adamw.m[name]!)
            t["v/\(name)"] = ([n], adamw.v[name]!)
        }
        let lossesJSON = String(data: try JSONSerialization.data(withJSONObject: losses.map { Double($0) }), encoding: .utf8)!
        try Safetensors.writeF32(checkpointURL, t, metadata: ["step": String(step), "losses": lossesJSON,
                                                             "optimizer_steps": String(adamw.stepCount),
                                                             "identity": bundle.checkpointIdentity])
    }

    private func saveLora(_ params: [String: UnsafeMutablePointer<Float>], _ counts: [String: Int], _ shapes: [String: [Int]]) throws -> URL {
        let dir = runDir.appendingPathComponent("lora")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var t: [String: (shape: [Int], values: [Float])] = [:]
        for (name, p) in params {
            guard let key = bundle.trainable[name], key.hasPrefix(BundleContract.loraKeyPrefix)
            else { throw TrainError.bundle("parameter \(name) has no LoRA key in the manifest") }
            t[key] = (shapes[name]!, Array(UnsafeBufferPointer(start: p, count: counts[name]!)))
        }
        let url = dir.appendingPathComponent(BundleContract.loraFile)
        try Safetensors.writeF32(url, t, metadata: bundle.loraMetadata)
        return url
    }
}
