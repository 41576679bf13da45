package org.ditskip.demo

/**
 * The app's binding to the native runtime core (device_runtime/, C API include/ditskip/ditskip.h) through
 * libditskip_jni (device_runtime/bindings/android/ditskip_jni.cpp). The core does the device's whole path, the same
 * as `ditskip-run personalize | train | generate`: the subject stage (photos -> subject bundle, [DitskipStages]),
 * training ([DitskipSession]: bundle verification, residual cache, ExecuTorch's train_step with the .ptd mapped,
 * AdamW, checkpoint and resume, the LoRA file) and generation with the trained LoRA ([DitskipStages.generate]).
 * Plain Kotlin (no Android classes), so tests/test_app_bindings.py runs it on a host JVM against the host-built core.
 */
class DitskipException(val status: Int, message: String) : Exception(message)

/** The core's status codes (ditskip.h `ditskip_status`). */
object DitskipStatus {
    const val OK = 0
    const val CANCELLED = 1
    const val BAD_INPUT = 2
    const val OVER_BUDGET = 3
    const val IO_ERROR = 4
    const val RUNTIME_ERROR = 5
    const val INTERNAL_ERROR = 6
}

/** The JNI functions, one per C API call. Not thread-safe: call them through [DitskipSession]. */
object DitskipNative {
    init {
        System.loadLibrary("ditskip_jni")
    }

    /** Called after every optimizer step on the thread running [trainerRun]; false stops the run (CANCELLED). */
    interface Progress {
        fun onStep(step: Int, totalSteps: Int, loss: Double): Boolean
    }

    /** Called as the subject stage or generation advances (entries, sampler steps, tiles); false stops it. */
    interface StageProgress {
        fun onProgress(stage: String, done: Int, total: Int): Boolean
    }

    @JvmStatic external fun version(): String
    @JvmStatic external fun lastError(): String
    /** CPU threads of the kernels and XNNPACK, for the whole process: set before any trainer or stage. */
    @JvmStatic external fun setThreads(threads: Int)
    @JvmStatic external fun threads(): Int
    @JvmStatic external fun bundleOpen(dir: String, verifyFiles: Boolean): Long
    @JvmStatic external fun bundleFree(bundle: Long)
    @JvmStatic external fun bundleManifestJson(bundle: Long): String
    /** Numbers < 0 and tri-state booleans (-1 / 0 / 1) < 0 keep the core's default. */
    @JvmStatic external fun trainerCreate(bundle: Long, runDir: String?, precision: String?, steps: Int,
                                          checkpointEvery: Int, resume: Int, devicePreprocess: Int, stopAfter: Int,
                                          budgetAnonBytes: Long, progress: Progress?): Long
    /** DitskipStatus.OK or CANCELLED; every other status is thrown as [DitskipException]. */
    @JvmStatic external fun trainerRun(trainer: Long): Int
    @JvmStatic external fun trainerSummaryJson(trainer: Long): String?
    @JvmStatic external fun trainerCancel(trainer: Long)
    @JvmStatic external fun trainerFree(trainer: Long)
    /** ditskip_personalize: strings null and numbers / tri-state booleans < 0 keep the core's defaults. */
    @JvmStatic external fun personalize(modelDir: String, photosDir: String, outDir: String?, prompt: String?,
                                        cacheMode: String?, resume: Int, overwrite: Int, keepBlocks: Int,
                                        stopAfter: Int, progress: StageProgress?): StageResult
    /** ditskip_generate: steps <= 0 and guidance < 0 keep the bundle's defaults. */
    @JvmStatic external fun generate(bundleDir: String, prompt: String, seed: Long, steps: Int, guidance: Double,
                                     lora: String?, precision: String?, outPng: String,
                                     progress: StageProgress?): StageResult
    /** [RssAnon, RssFile] bytes of this process, -1 where not reported. */
    @JvmStatic external fun footprint(): LongArray
}

/** A subject stage's or a generation's end: finished (status OK) or stopped by the listener (CANCELLED), with the
 *  summary JSON `ditskip-run personalize --no-train --json` (its "subject_stage") / `ditskip-run generate --json`
 *  prints. Every other status is thrown as [DitskipException]. Built by the JNI library. */
class StageResult(val status: Int, val summaryJson: String?) {
    val cancelled: Boolean get() = status == DitskipStatus.CANCELLED
}

/** `ditskip-run personalize`'s subject-stage options; null keeps the core's default. */
class PersonalizeOptions(
    val outDir: String? = null,
    val prompt: String? = null,
    val cacheMode: String? = null,
    val resume: Boolean? = null,
    val overwrite: Boolean? = null,
    val keepBlocks: Boolean? = null,
    val stopAfter: Int? = null
)

/** `ditskip-run generate`'s options; null keeps the bundle's default. */
class GenerateOptions(
    val seed: Long = 0,
    val steps: Int? = null,
    val guidance: Double? = null,
    val lora: String? = null,
    val precision: String? = null
)

/**
 * The subject stage and generation, one call each on the caller's thread (call them from the same single-thread
 * dispatcher as every other core call). [cancel] (any thread) stops the call in progress at its next progress point:
 * a subject stage keeps what it wrote, and the same call later continues it.
 */
class DitskipStages {
    @Volatile private var cancelled = false

    fun personalize(modelDir: String, photosDir: String, options: PersonalizeOptions = PersonalizeOptions(),
                    onProgress: (stage: String, done: Int, total: Int) -> Boolean = { _, _, _ -> true }): StageResult {
        cancelled = false
        return DitskipNative.personalize(modelDir, photosDir, options.outDir, options.prompt, options.cacheMode,
            tri(options.resume), tri(options.overwrite), tri(options.keepBlocks), options.stopAfter ?: -1,
            listener(onProgress))
    }

    fun generate(bundleDir: String, prompt: String, outPng: String, options: GenerateOptions = GenerateOptions(),
                 onProgress: (stage: String, done: Int, total: Int) -> Boolean = { _, _, _ -> true }): StageResult {
        cancelled = false
        return DitskipNative.generate(bundleDir, prompt, options.seed, options.steps ?: 0, options.guidance ?: -1.0,
            options.lora, options.precision, outPng, listener(onProgress))
    }

    /** Stops the running call at its next progress point (it returns CANCELLED). Any thread. */
    fun cancel() {
        cancelled = true
    }

    private fun listener(onProgress: (String, Int, Int) -> Boolean) = object : DitskipNative.StageProgress {
        override fun onProgress(stage: String, done: Int, total: Int): Boolean = !cancelled && onProgress(stage, done, total)
    }

    private fun tri(b: Boolean?): Int = if (b == null) -1 else if (b) 1 else 0
}

/** `ditskip-run train`'s options; null keeps the core's default (ditskip_train_default_params). */
class TrainOptions(
    val runDir: String? = null,
    val precision: String? = null,
    val steps: Int? = null,
    val checkpointEvery: Int? = null,
    val resume: Boolean? = null,
    val devicePreprocess: Boolean? = null,
    val stopAfter: Int? = null,
    val budgetAnonBytes: Long? = null
)

/** A run's end: finished, or cancelled after checkpointing; the summary JSON `ditskip-run train --json` prints. */
class TrainResult(val status: Int, val summaryJson: String?) {
    val cancelled: Boolean get() = status == DitskipStatus.CANCELLED
}

/**
 * One opened bundle and the runs trained on it. Every call is serialized behind one lock (the core's handles are
 * not thread-safe); [cancel] is the one call that may come from another thread while [train] runs. [train] runs on
 * the caller's thread: call it from a background dispatcher.
 */
class DitskipSession(bundleDir: String, verifyFiles: Boolean = true) : AutoCloseable {
    private val lock = Any()
    private val trainerLock = Any()            // guards `trainer` between train's free and cancel
    private var bundle: Long = DitskipNative.bundleOpen(bundleDir, verifyFiles)
    private var trainer: Long = 0

    fun manifestJson(): String = synchronized(lock) { DitskipNative.bundleManifestJson(open()) }

    fun train(options: TrainOptions = TrainOptions(), onStep: (step: Int, total: Int, loss: Double) -> Boolean): TrainResult =
        synchronized(lock) {
            val progress = object : DitskipNative.Progress {
                override fun onStep(step: Int, totalSteps: Int, loss: Double): Boolean = onStep(step, totalSteps, loss)
            }
            val t = DitskipNative.trainerCreate(open(), options.runDir, options.precision, options.steps ?: -1,
                options.checkpointEvery ?: -1, tri(options.resume), tri(options.devicePreprocess),
                options.stopAfter ?: -1, options.budgetAnonBytes ?: -1L, progress)
            synchronized(trainerLock) { trainer = t }
            try {
                val status = DitskipNative.trainerRun(t)
                TrainResult(status, DitskipNative.trainerSummaryJson(t))
            } finally {
                synchronized(trainerLock) {
                    trainer = 0
                    DitskipNative.trainerFree(t)
                }
            }
        }

    /** Stops a running [train] after its current step (it checkpoints and returns CANCELLED). Any thread. */
    fun cancel() {
        synchronized(trainerLock) { if (trainer != 0L) DitskipNative.trainerCancel(trainer) }
    }

    /** Waits for a running [train] to return, then frees the bundle. */
    override fun close() {
        synchronized(lock) {
            if (bundle != 0L) DitskipNative.bundleFree(bundle)
            bundle = 0
        }
    }

    private fun open(): Long {
        check(bundle != 0L) { "DitskipSession is closed" }
        return bundle
    }

    private fun tri(b: Boolean?): Int = if (b == null) -1 else if (b) 1 else 0

    companion object {
        /** [RssAnon, RssFile] bytes of this process as the core reads it (-1 where not reported). */
        fun footprint(): LongArray = DitskipNative.footprint()
        fun version(): String = DitskipNative.version()
    }
}
