package org.ditskip.demo

import android.graphics.Bitmap
import android.net.Uri
import android.os.Bundle
import android.widget.Button
import android.widget.EditText
import android.widget.ImageView
import android.widget.LinearLayout
import android.widget.ScrollView
import android.widget.TextView
import androidx.activity.result.PickVisualMediaRequest
import androidx.activity.result.contract.ActivityResultContracts
import androidx.appcompat.app.AppCompatActivity
import androidx.lifecycle.lifecycleScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext
import org.json.JSONArray
import org.json.JSONObject
import java.io.File

/**
 * Pick photos, load a bundle, train, watch loss and memory, get the LoRA, and see the subject. A model bundle (no
 * photos: `ditskip-edge compile` without --images) first runs the subject stage here on the picked photos (decoded,
 * normalised, residual cache with progress, resumable) and trains the subject bundle it writes. After training, a
 * bundle compiled with --generation draws the prompt (the training prompt, or the user's own) with the trained
 * LoRA merged at the weights' bit width (Generator.kt; the same loop as `python -m ditskip_edge.runtime generate`),
 * shown here and written to <run>/subject.png. Also driven by the handset script:
 *   adb shell am start -n org.ditskip.demo/.MainActivity --es bundle <dir> --ez autostart true
 * which writes <run>/device_run.json (losses, per-step memory, peak VmHWM, LoRA path) for `adb pull`.
 */
class MainActivity : AppCompatActivity() {
    private lateinit var status: TextView
    private lateinit var bundlePath: EditText
    private lateinit var prompt: EditText
    private lateinit var picture: ImageView
    private var photos: List<Uri> = emptyList()
    private var busy = false                         // a stage or a training run is going: a second tap waits for it
    private var lastStage: Pair<File, File>? = null  // model bundle -> the subject bundle its stage wrote this session

    private val pickPhotos = registerForActivityResult(ActivityResultContracts.PickMultipleVisualMedia(10)) { uris ->
        photos = uris
        status.text = "${uris.size} photo(s) picked"
    }

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        val defaultBundle = File(getExternalFilesDir(null), "bundle").absolutePath
        bundlePath = EditText(this).apply { setText(intent.getStringExtra("bundle") ?: defaultBundle) }
        status = TextView(this).apply { text = if (PortableRng.selfCheck()) "RNG self-check ok" else "RNG self-check FAILED" }
        val pick = Button(this).apply {
            text = "Pick photos"
            setOnClickListener { pickPhotos.launch(PickVisualMediaRequest(ActivityResultContracts.PickVisualMedia.ImageOnly)) }
        }
        val train = Button(this).apply { text = "Train"; setOnClickListener { startTraining() } }
        prompt = EditText(this).apply { hint = "prompt (default: the training prompt)" }
        val draw = Button(this).apply { text = "Generate"; setOnClickListener { startGeneration() } }
        picture = ImageView(this).apply { adjustViewBounds = true; minimumHeight = 512 }
        val col = LinearLayout(this).apply {
            orientation = LinearLayout.VERTICAL
            addView(bundlePath); addView(pick); addView(train); addView(status); addView(prompt); addView(draw)
            addView(picture)
        }
        setContentView(ScrollView(this).apply { addView(col) })
        if (intent.getBooleanExtra("autostart", false)) startTraining()
    }

    /**
     * Train: a subject bundle as before; a model bundle (manifest bundle_kind = MODEL_BUNDLE_KIND) first goes through
     * the subject stage on the phone ([subjectStage]) and the subject bundle it wrote is trained the same way.
     */
    private fun startTraining() {
        if (busy) return
        busy = true
        val given = File(bundlePath.text.toString())
        val picked = photos
        lifecycleScope.launch {
            try {
                if (withContext(Dispatchers.IO) { isModelBundle(given) }) {
                    val stage = subjectStage(given, picked)
                    if (stage != null) train(stage.first, stage.second)
                } else {
                    train(given)
                }
            } finally {
                busy = false
            }
        }
    }

    /** Training, as it always was for a subject bundle; `stage`: the subject stage's report when it wrote `root`. */
    private suspend fun train(root: File, stage: JSONObject? = null) {
        val runDir = runDirFor(root)
        val report = JSONObject().put("runtime", "executorch-android").put("bundle", root.absolutePath)
        if (stage != null) report.put("subject_stage", stage)
        try {
            val summary = withContext(Dispatchers.Default) {
                val bundle = TrainingBundle(root)
                post("verifying bundle files ...")
                bundle.verifyFiles()
                if (bundle.cacheMode != BundleContract.STORED_MODE) {
                    // x0-only / cache-free: each step's entry computed with the bundle's forward programs (refused
                    // here in one line: lowrank codec, missing programs, weights in a .ptd)
                    bundle.useEntries(CacheFreeEntries(bundle, EtForwardRunner(root, bundle.manifest)))
                }
                // the picked photos are the bundle's only for a host-written bundle: after the stage, x0 is the cache's
                val pre = Preprocess(this@MainActivity, bundle, if (stage == null) photos else emptyList())
                val trainer = EtTrainer(bundle, runDir)
                val lora = trainer.train(if (pre.available) pre::x0 else null) { p ->
                    post("step ${p.step}/${p.total}  loss ${"%.4f".format(p.loss)}\n" +
                         "RSS ${p.memory.rssBytes shr 20} MiB  peak ${p.memory.hwmBytes shr 20} MiB  " +
                         "native heap ${p.memory.nativeHeapBytes shr 20} MiB")
                }
                report.put("status", "ok").put("lora", lora.absolutePath)
                    .put("x0_source", if (pre.available) "device preprocessing program" else "cache entry")
                    .put("cache_mode", bundle.cacheMode)
                    .put("losses", JSONArray(trainer.losses.map { it.toDouble() }))
                    .put("timeline_fields", JSONArray(listOf("step", "rss_bytes", "hwm_bytes", "native_heap_bytes")))
                    .put("timeline", JSONArray(trainer.memoryTimeline.map { (s, m) ->
                        JSONArray(listOf(s, m.rssBytes, m.hwmBytes, m.nativeHeapBytes)) }))
                "LoRA written: $lora"
            }
            status.text = summary
            if (TrainingBundle(root).manifest.has(BundleContract.GEN_FIELD)) startGeneration()
        } catch (e: Throwable) {     // OutOfMemoryError included: report it instead of dying silently
            report.put("status", if (e is OutOfMemoryError) "out_of_memory" else "error").put("message", e.toString())
            status.text = "failed: $e"
        } finally {
            report.put("peak_rss_bytes", MemoryProbe.read().hwmBytes)
            runDir.mkdirs()
            File(runDir, "device_run.json").writeText(report.toString(1))
        }
    }

    private fun runDirFor(root: File): File = File(intent.getStringExtra("run_dir") ?: File(root, "runs/android").absolutePath)

    /** Whether `root` holds a model bundle (no photos: the subject stage runs first). A missing or unreadable manifest
     *  is not: TrainingBundle then says what is wrong, as before. */
    private fun isModelBundle(root: File): Boolean = try {
        JSONObject(File(root, BundleContract.MANIFEST_FILE).readText()).optString(BundleContract.BUNDLE_KIND_FIELD) ==
            BundleContract.MODEL_BUNDLE_KIND
    } catch (e: Exception) {
        false
    }

    /** The subject bundle the stage writes for `model` and these photos: beside the model bundle, named by the run
     *  identity (model bundle, photos' names and hashes, prompt, mode), so other photos get another folder and the
     *  same photos find their finished bundle or their interrupted `.<name>.partial`. */
    private fun subjectBundleFor(model: File, identity: String): File =
        File(model.absoluteFile.parentFile, "${model.name}$SUBJECT_SUFFIX${identity.substring(0, 12)}")

    /** The latest subject bundle a stage wrote for `model` (finished: its manifest is there), or null. */
    private fun latestSubjectBundle(model: File): File? {
        val last = lastStage
        if (last != null && last.first == model.absoluteFile && File(last.second, BundleContract.MANIFEST_FILE).isFile) return last.second
        val found = (model.absoluteFile.parentFile?.listFiles() ?: return null).filter { f ->
            f.isDirectory && f.name.startsWith("${model.name}$SUBJECT_SUFFIX") && File(f, BundleContract.MANIFEST_FILE).isFile
        }
        return found.sortedByDescending { File(it, BundleContract.MANIFEST_FILE).lastModified() }.firstOrNull()
    }

    /** The bundle that training and generation use for the path typed: itself, or for a model bundle the subject
     *  bundle its stage wrote (the path itself when there is none yet: TrainingBundle then refuses it in one line). */
    private fun trainedRoot(given: File): File = if (isModelBundle(given)) latestSubjectBundle(given) ?: given else given

    /** A refusal's one line (require / error: the message the code wrote); anything else as it is. */
    private fun oneLine(e: Throwable): String =
        if ((e is IllegalArgumentException || e is IllegalStateException) && e.message != null) e.message!! else e.toString()

    /**
     * The subject stage on the phone (runtime/subject.py personalize, stored mode): the picked photos decoded here
     * (PhotoDecode: ImageDecoder, EXIF orientation), normalised to the model bundle's s_max_px (PhotoNormalise), the
     * residual cache computed with the bundle's encode / embed / block programs (ModelBundle.writeCache) inside the
     * subject bundle SubjectBundle.write assembles, progress on screen. Killed part-way, it leaves `.<name>.partial`:
     * the next tap with the same photos continues after the last journalled cache entry. A finished subject bundle
     * for the same photos is trained as it is (training resumes from its checkpoint); with no photos picked, the
     * latest one the stage wrote is. Returns the subject bundle and the stage's report for device_run.json, or null
     * after showing the refusal in one line.
     */
    private suspend fun subjectStage(model: File, picked: List<Uri>): Pair<File, JSONObject>? {
        val report = JSONObject().put("model_bundle", model.absolutePath)
        return try {
            val out = withContext(Dispatchers.Default) {
                val earlier = if (picked.isEmpty()) latestSubjectBundle(model) else null
                if (earlier != null) {
                    post("no photos picked: training ${earlier.name}, the subject bundle an earlier stage wrote")
                    report.put("status", "earlier").put("subject_bundle", earlier.absolutePath)
                    return@withContext earlier
                }
                post("subject stage: reading the model bundle ...")
                val bundle = ModelBundle(model)
                @Suppress("UNCHECKED_CAST")
                val minPhotos = ((bundle.manifest["model_bundle"] as? Map<String, Any?>)?.get("min_photos") as? Long)?.toInt() ?: 1
                require(picked.size >= minPhotos) { "${picked.size} photos: this model bundle needs at least $minPhotos" }
                // the programs' weights must be in the .pte (a mapped .ptd is refused here, in one line, before any work)
                val runner = EtForwardRunner(model, JSONObject(File(model, BundleContract.MANIFEST_FILE).readText()))
                val cfg = bundle.scheduleConfig
                val subjectPhotos = PhotoDecode.load(contentResolver, picked, cfg) { i, n ->
                    post("subject stage: photo $i/$n decoded and normalised")
                }
                val promptIndex = 0                                         // personalize's default: the first prompt
                val identity = bundle.runIdentity(subjectPhotos, bundle.prompts[promptIndex].first, BundleContract.STORED_MODE)
                val dest = subjectBundleFor(model, identity)
                report.put("subject_bundle", dest.absolutePath).put("photos", subjectPhotos.size)
                if (File(dest, BundleContract.MANIFEST_FILE).isFile) {
                    post("subject stage: ${dest.name} is already written for these photos: training it")
                    report.put("status", "already written")
                    return@withContext dest
                }
                val resuming = File(SubjectBundle.workDirFor(dest), "${SubjectBundle.CACHE_DIR}/${CacheWriter.JOURNAL}").isFile
                post("subject stage: verifying the model bundle, writing the photos" +
                     if (resuming) " (continuing an interrupted run) ..." else " ...")
                var computed = 0
                val t0 = System.nanoTime()
                SubjectBundle.write(bundle, subjectPhotos, promptIndex, dest, BitmapPngWriter, overwrite = true, resume = true,
                                    runner = runner) { done, total ->
                    computed += 1
                    val m = MemoryProbe.read()
                    post("subject stage: cache entry $done/$total" + (if (computed < done) " (${done - computed} resumed)" else "") +
                         "\nRSS ${m.rssBytes shr 20} MiB  peak ${m.hwmBytes shr 20} MiB")
                } ?: error("subject stage stopped before the end")
                report.put("status", "ok").put("computed_entries", computed)
                    .put("seconds", (System.nanoTime() - t0) / 1e9)
                dest
            }
            lastStage = Pair(model.absoluteFile, out)
            report.put("peak_rss_bytes", MemoryProbe.read().hwmBytes)
            Pair(out, report)
        } catch (e: Throwable) {     // refusals (too few photos, unreadable photo, another model's programs, .ptd) in one line
            status.text = "subject stage failed: ${oneLine(e)}"
            val outcome = if (e is OutOfMemoryError) "out_of_memory" else "error"
            report.put("status", outcome).put("message", oneLine(e)).put("peak_rss_bytes", MemoryProbe.read().hwmBytes)
            val runDir = intent.getStringExtra("run_dir")
            if (runDir != null) {                                   // the handset script waits for device_run.json
                File(runDir).mkdirs()
                File(runDir, "device_run.json").writeText(
                    JSONObject().put("runtime", "executorch-android").put("bundle", model.absolutePath)
                        .put("status", outcome).put("message", oneLine(e))
                        .put("subject_stage", report).toString(1))
            }
            null
        }
    }

    /** Draw the prompt with the trained LoRA (if the run has one) and show it. One image, seed 0, the bundle's steps. */
    private fun startGeneration() {
        val given = File(bundlePath.text.toString())
        lifecycleScope.launch {
            try {
                val bitmap = withContext(Dispatchers.Default) {
                    val root = trainedRoot(given)                    // a model bundle: the subject bundle its stage wrote
                    val runDir = runDirFor(root)
                    val manifest = TrainingBundle(root).manifest
                    val gen = Generator(root, manifest)
                    val text = prompt.text.toString().ifBlank { manifest.getJSONObject("subject_stage").getString("prompt") }
                    val lora = File(File(runDir, "lora"), BundleContract.LORA_FILE)
                    val merged = if (lora.isFile) gen.mergeLora(lora, File(runDir, "lora/merged/${gen.precision}.safetensors")) else null
                    val sampler = manifest.getJSONObject(BundleContract.GEN_FIELD).getJSONObject("sampler")
                    val t0 = System.nanoTime()
                    val rgb = gen.generate(text, 0L, sampler.getInt("default_steps"), sampler.getDouble("guidance_scale").toFloat(),
                                           merged) { i, n -> post("generating: step $i/$n") }
                    val side = Math.round(Math.sqrt(rgb.size / 3.0)).toInt()
                    val colors = IntArray(side * side) { p ->
                        val r = Math.round(rgb[3 * p] * 255f); val g = Math.round(rgb[3 * p + 1] * 255f); val b = Math.round(rgb[3 * p + 2] * 255f)
                        (0xFF shl 24) or (r shl 16) or (g shl 8) or b
                    }
                    val bmp = Bitmap.createBitmap(colors, side, side, Bitmap.Config.ARGB_8888)
                    runDir.mkdirs()
                    File(runDir, "subject.png").outputStream().use { bmp.compress(Bitmap.CompressFormat.PNG, 100, it) }
                    post("\"$text\": ${"%.1f".format((System.nanoTime() - t0) / 1e9)} s" + if (merged == null) " (no LoRA yet)" else "")
                    Bitmap.createScaledBitmap(bmp, 512, 512, false)
                }
                picture.setImageBitmap(bitmap)
            } catch (e: Throwable) {
                status.text = "generation failed: $e"
            }
        }
    }

    private fun post(text: String) = runOnUiThread { status.text = text }

    private companion object {
        const val SUBJECT_SUFFIX = "-subject-"
    }
}
