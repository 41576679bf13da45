import CDitskip
import Foundation

/// The iOS binding of the native runtime core (device_runtime/, C API include/ditskip/ditskip.h). The core does the
/// device's whole path, the same as `ditskip-run personalize | train | generate`: the subject stage (photos -> a
/// subject bundle, `DitskipStages.personalize`), training (`DitskipSession`: bundle verification, residual cache,
/// ExecuTorch's train_step with the .ptd mapped, AdamW, checkpoint and resume, the LoRA file) and generation with the
/// trained LoRA (`DitskipStages.generate`).
/// Not compiled on the machines this was written on (no Swift toolchain): tests/test_app_bindings.py checks that
/// every `ditskip_*` name used here is in the header.

/// A failed call: the core's status (ditskip.h `ditskip_status`) and its one-line message (ditskip_last_error).
public struct DitskipError: Error, CustomStringConvertible, Sendable {
    public let status: Int32
    public let message: String
    public var description: String { message }

    static func last(_ status: ditskip_status) -> DitskipError {
        let text = ditskip_last_error().map { String(cString: $0) } ?? ""
        return DitskipError(status: Int32(status.rawValue),
                            message: text.isEmpty ? "ditskip: status \(status.rawValue)" : text)
    }
}

/// `ditskip-run train`'s options; nil keeps the core's default (ditskip_train_default_params).
public struct TrainOptions: Sendable {
    public var runDir: URL?
    public var precision: String?
    public var steps: Int32?
    public var checkpointEvery: Int32?
    public var resume: Bool?
    public var devicePreprocess: Bool?
    public var stopAfter: Int32?
    public var budgetAnonBytes: Int64?

    public init(runDir: URL? = nil, precision: String? = nil, steps: Int32? = nil, checkpointEvery: Int32? = nil,
                resume: Bool? = nil, devicePreprocess: Bool? = nil, stopAfter: Int32? = nil,
                budgetAnonBytes: Int64? = nil) {
        self.runDir = runDir; self.precision = precision; self.steps = steps; self.checkpointEvery = checkpointEvery
        self.resume = resume; self.devicePreprocess = devicePreprocess; self.stopAfter = stopAfter
        self.budgetAnonBytes = budgetAnonBytes
    }
}

/// A run's end: finished, or cancelled after checkpointing; the summary JSON `ditskip-run train --json` prints.
public struct TrainResult: Sendable {
    public let cancelled: Bool
    public let summaryJSON: String?
}

/// The trainer of the run in progress, for `cancel()` from outside the actor (ditskip_trainer_cancel is thread-safe;
/// the lock keeps it from racing the trainer's free).
private final class RunningTrainer: @unchecked Sendable {
    private let lock = NSLock()
    private var trainer: OpaquePointer?

    func set(_ t: OpaquePointer?) { lock.lock(); trainer = t; lock.unlock() }
    func cancel() { lock.lock(); if let trainer { ditskip_trainer_cancel(trainer) }; lock.unlock() }
    func free(_ t: OpaquePointer) { lock.lock(); trainer = nil; ditskip_trainer_free(t); lock.unlock() }
}

/// The progress closure, reached from the C callback through its user data.
private final class ProgressBox {
    let onStep: (Int, Int, Double) -> Bool
    init(_ onStep: @escaping (Int, Int, Double) -> Bool) { self.onStep = onStep }
}

/// One opened bundle and the runs trained on it. The actor serializes every call (the core's handles are not
/// thread-safe); `cancel()` is the one call that may come from anywhere while `train` runs. `train` blocks the actor
/// for the run: call it from a Task and show progress from `onStep` (called on the training thread).
public actor DitskipSession {
    private let bundle: OpaquePointer
    private let running = RunningTrainer()

    public init(bundleDir: URL, verifyFiles: Bool = true) throws {
        var opened: OpaquePointer?
        let status = ditskip_bundle_open(bundleDir.path, verifyFiles, &opened)
        guard status == DITSKIP_OK, let opened else { throw DitskipError.last(status) }
        bundle = opened
    }

    deinit { ditskip_bundle_free(bundle) }

    /// The verified manifest as JSON (without its digest line).
    public func manifestJSON() throws -> String {
        guard let json = ditskip_bundle_manifest_json(bundle) else { throw DitskipError.last(DITSKIP_INTERNAL_ERROR) }
        defer { ditskip_string_free(json) }
        return String(cString: json)
    }

    /// Trains the bundle's schedule (or options.steps of it). Returns when the run finished or was cancelled (by
    /// `onStep` returning false or by `cancel()`: the steps done are checkpointed); throws DitskipError otherwise
    /// (a refusal, over budget with the checkpoint untouched, I/O, ExecuTorch).
    public func train(_ options: TrainOptions = TrainOptions(),
                      onStep: @escaping (_ step: Int, _ total: Int, _ loss: Double) -> Bool = { _, _, _ in true })
        throws -> TrainResult {
        var params = ditskip_train_default_params()
        // the params' strings, owned here until the trainer is freed (after `running.free` below)
        let runDir = options.runDir.flatMap { strdup($0.path) }, precision = options.precision.flatMap { strdup($0) }
        defer { free(runDir); free(precision) }
        if let runDir { params.run_dir = UnsafePointer(runDir) }
        if let precision { params.precision = UnsafePointer(precision) }
        if let v = options.steps { params.steps = v }
        if let v = options.checkpointEvery { params.checkpoint_every = v }
        if let v = options.resume { params.resume = v }
        if let v = options.devicePreprocess { params.device_preprocess = v }
        if let v = options.stopAfter { params.stop_after = v }
        if let v = options.budgetAnonBytes { params.budget_anon_bytes = v }
        let box = ProgressBox(onStep)
        params.progress = { step, total, loss, user in
            Unmanaged<ProgressBox>.fromOpaque(user!).takeUnretainedValue().onStep(Int(step), Int(total), loss)
        }
        params.progress_user_data = Unmanaged.passUnretained(box).toOpaque()

        var created: OpaquePointer?
        let status = ditskip_trainer_create(bundle, &params, &created)
        guard status == DITSKIP_OK, let trainer = created else { throw DitskipError.last(status) }
        running.set(trainer)
        defer { running.free(trainer) }
        let ran = withExtendedLifetime(box) { ditskip_trainer_run(trainer) }
        guard ran == DITSKIP_OK || ran == DITSKIP_CANCELLED else { throw DitskipError.last(ran) }
        let summary = ditskip_trainer_summary_json(trainer)
        defer { ditskip_string_free(summary) }
        return TrainResult(cancelled: ran == DITSKIP_CANCELLED, summaryJSON: summary.map { String(cString: $0) })
    }

    /// Stops a running `train` after its current step (it checkpoints and returns cancelled). Any thread.
    public nonisolated func cancel() { running.cancel() }

    /// This process's RssAnon and RssFile as the core reads them, bytes (-1 where the platform does not report them).
    public static func footprint() -> (anonBytes: Int64, fileBytes: Int64) {
        var anon: Int64 = -1, file: Int64 = -1
        ditskip_footprint(&anon, &file)
        return (anon, file)
    }

    public static var version: String { String(cString: ditskip_version()) }

    /// CPU threads of the kernels and XNNPACK, for the whole process (default: one per core); set it before any
    /// training or stage starts.
    public static func setThreads(_ threads: Int32) throws {
        let status = ditskip_set_threads(threads)
        guard status == DITSKIP_OK else { throw DitskipError.last(status) }
    }

    public static var threads: Int32 { ditskip_threads() }
}

/// A subject stage's or a generation's end: finished, or stopped by `onProgress` / `cancel()` (a subject stage keeps
/// what it wrote and continues on the next call), with the summary JSON `ditskip-run personalize --no-train --json`
/// (its "subject_stage") / `ditskip-run generate --json` prints.
public struct StageResult: Sendable {
    public let cancelled: Bool
    public let summaryJSON: String?
}

/// `ditskip-run personalize`'s subject-stage options; nil keeps the core's default.
public struct PersonalizeOptions: Sendable {
    public var outDir: URL?
    public var prompt: String?
    public var cacheMode: String?
    public var resume: Bool?
    public var overwrite: Bool?
    public var keepBlocks: Bool?
    public init(outDir: URL? = nil, prompt: String? = nil, cacheMode: String? = nil, resume: Bool? = nil,
                overwrite: Bool? = nil, keepBlocks: Bool? = nil) {
        self.outDir = outDir; self.prompt = prompt; self.cacheMode = cacheMode; self.resume = resume
        self.overwrite = overwrite; self.keepBlocks = keepBlocks
    }
}

/// `ditskip-run generate`'s options; nil keeps the bundle's default.
public struct GenerateOptions: Sendable {
    public var seed: UInt64
    public var steps: Int32?
    public var guidance: Double?
    public var lora: URL?
    public var precision: String?
    public init(seed: UInt64 = 0, steps: Int32? = nil, guidance: Double? = nil, lora: URL? = nil,
                precision: String? = nil) {
        self.seed = seed; self.steps = steps; self.guidance = guidance; self.lora = lora; self.precision = precision
    }
}

/// The stage closure and the cancel flag, reached from the C callback through its user data.
private final class StageBox: @unchecked Sendable {
    let onProgress: (String, Int, Int) -> Bool
    private let lock = NSLock()
    private var stop = false
    init(_ onProgress: @escaping (String, Int, Int) -> Bool) { self.onProgress = onProgress }
    func cancel() { lock.lock(); stop = true; lock.unlock() }
    var cancelled: Bool { lock.lock(); defer { lock.unlock() }; return stop }
}

private let stageCallback: ditskip_stage_callback = { stage, done, total, user in
    let box = Unmanaged<StageBox>.fromOpaque(user!).takeUnretainedValue()
    return !box.cancelled && box.onProgress(stage.map { String(cString: $0) } ?? "", Int(done), Int(total))
}

/// The stage running now, for `cancel()` from outside the actor (which is busy inside the call).
private final class RunningStage: @unchecked Sendable {
    private let lock = NSLock()
    private var box: StageBox?
    func set(_ b: StageBox?) { lock.lock(); box = b; lock.unlock() }
    func cancel() { lock.lock(); box?.cancel(); lock.unlock() }
}

/// The subject stage and generation. The actor serializes the calls (each blocks it for its duration: call them from
/// a Task); `cancel()` (any thread) stops the one running at its next progress point.
public actor DitskipStages {
    private let running = RunningStage()

    public init() {}

    public func personalize(modelDir: URL, photosDir: URL, _ options: PersonalizeOptions = PersonalizeOptions(),
                            onProgress: @escaping (_ stage: String, _ done: Int, _ total: Int) -> Bool = { _, _, _ in true })
        throws -> StageResult {
        var params = ditskip_personalize_default_params()
        let out = options.outDir.flatMap { strdup($0.path) }, prompt = options.prompt.flatMap { strdup($0) }
        let mode = options.cacheMode.flatMap { strdup($0) }
        defer { free(out); free(prompt); free(mode) }
        if let out { params.out_dir = UnsafePointer(out) }
        if let prompt { params.prompt = UnsafePointer(prompt) }
        if let mode { params.cache_mode = UnsafePointer(mode) }
        if let v = options.resume { params.resume = v }
        if let v = options.overwrite { params.overwrite = v }
        if let v = options.keepBlocks { params.keep_blocks = v }
        let box = begin(onProgress)
        defer { end() }
        params.progress = stageCallback
        params.progress_user_data = Unmanaged.passUnretained(box).toOpaque()
        var summary: UnsafeMutablePointer<CChar>?
        let status = withExtendedLifetime(box) { ditskip_personalize(modelDir.path, photosDir.path, &params, &summary) }
        return try finish(status, summary)
    }

    public func generate(bundleDir: URL, prompt: String, outPNG: URL, _ options: GenerateOptions = GenerateOptions(),
                         onProgress: @escaping (_ stage: String, _ done: Int, _ total: Int) -> Bool = { _, _, _ in true })
        throws -> StageResult {
        var params = ditskip_generate_default_params()
        let text = strdup(prompt), out = strdup(outPNG.path)
        let lora = options.lora.flatMap { strdup($0.path) }, precision = options.precision.flatMap { strdup($0) }
        defer { free(text); free(out); free(lora); free(precision) }
        params.prompt = UnsafePointer(text)
        params.out_png = UnsafePointer(out)
        params.seed = options.seed
        if let v = options.steps { params.steps = v }
        if let v = options.guidance { params.guidance = v }
        if let lora { params.lora = UnsafePointer(lora) }
        if let precision { params.precision = UnsafePointer(precision) }
        let box = begin(onProgress)
        defer { end() }
        params.progress = stageCallback
        params.progress_user_data = Unmanaged.passUnretained(box).toOpaque()
        var summary: UnsafeMutablePointer<CChar>?
        let status = withExtendedLifetime(box) { ditskip_generate(bundleDir.path, &params, &summary) }
        return try finish(status, summary)
    }

    /// Stops the running subject stage or generation at its next progress point. Any thread.
    public nonisolated func cancel() { running.cancel() }

    private func begin(_ onProgress: @escaping (String, Int, Int) -> Bool) -> StageBox {
        let box = StageBox(onProgress)
        running.set(box)
        return box
    }

    private func end() { running.set(nil) }

    private func finish(_ status: ditskip_status, _ summary: UnsafeMutablePointer<CChar>?) throws -> StageResult {
        defer { ditskip_string_free(summary) }
        guard status == DITSKIP_OK || status == DITSKIP_CANCELLED else { throw DitskipError.last(status) }
        return StageResult(cancelled: status == DITSKIP_CANCELLED, summaryJSON: summary.map { String(cString: $0) })
    }
}
