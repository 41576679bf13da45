import CDitskip
import Foundation

/// The iOS binding of the native runtime core (device_runtime/, C API include/ditskip/ditskip.h). The core does
/// everything a training run does (bundle verification, schedule, residual cache, ExecuTorch's train_step with the
/// .ptd mapped, AdamW, checkpoint and resume, the LoRA file, the summary), the same as `ditskip-run train`.
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
}
