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
 * Pick photos, load a bundle, train, watch loss and memory, get the LoRA, and see the subject: after training, a
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

    private fun startTraining() {
        val root = File(bundlePath.text.toString())
        val runDir = File(intent.getStringExtra("run_dir") ?: File(root, "runs/android").absolutePath)
        lifecycleScope.launch {
            val report = JSONObject().put("runtime", "executorch-android").put("bundle", root.absolutePath)
            try {
                val summary = withContext(Dispatchers.Default) {
                    val bundle = TrainingBundle(root)
                    post("verifying bundle files ...")
                    bundle.verifyFiles()
                    val pre = Preprocess(this@MainActivity, bundle, photos)
                    val trainer = EtTrainer(bundle, runDir)
                    val lora = trainer.train(if (pre.available) pre::x0 else null) { p ->
                        post("step ${p.step}/${p.total}  loss ${"%.4f".format(p.loss)}\n" +
                             "RSS ${p.memory.rssBytes shr 20} MiB  peak ${p.memory.hwmBytes shr 20} MiB  " +
                             "native heap ${p.memory.nativeHeapBytes shr 20} MiB")
                    }
                    report.put("status", "ok").put("lora", lora.absolutePath)
                        .put("x0_source", if (pre.available) "device preprocessing program" else "cache entry")
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
    }

    /** Draw the prompt with the trained LoRA (if the run has one) and show it. One image, seed 0, the bundle's steps. */
    private fun startGeneration() {
        val root = File(bundlePath.text.toString())
        val runDir = File(intent.getStringExtra("run_dir") ?: File(root, "runs/android").absolutePath)
        lifecycleScope.launch {
            try {
                val bitmap = withContext(Dispatchers.Default) {
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
}
