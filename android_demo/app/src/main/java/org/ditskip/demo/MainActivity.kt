package org.ditskip.demo

import android.graphics.BitmapFactory
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
import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext
import org.json.JSONObject
import java.io.File
import java.util.concurrent.Executors

/**
 * UI over the native runtime core (DitskipRuntime.kt): pick photos, choose a bundle, Train, Generate, Stop. Train on
 * a model bundle runs the whole device path in the core, as `ditskip-run personalize` does: the picked photos
 * (decoded upright by the platform) -> the subject stage (a subject bundle beside the model bundle; the photos never
 * leave the phone) -> training; on a subject bundle, training alone. The core writes RUN/checkpoint.safetensors,
 * RUN/lora/pytorch_lora_weights.safetensors and RUN/summary.json; a second Train resumes (the subject stage too).
 * Generate draws the prompt with the bundle's generation programs and the trained LoRA, as `ditskip-run generate`.
 * Also started by adb:
 *   adb shell am start -n org.ditskip.demo/.MainActivity --es bundle <dir> [--es run_dir <dir>] --ez autostart true
 */
class MainActivity : AppCompatActivity() {
    private lateinit var status: TextView
    private lateinit var bundlePath: EditText
    private lateinit var prompt: EditText
    private lateinit var picture: ImageView
    private var photos: List<Uri> = emptyList()
    private var busy = false                                    // a Train is going: a second tap waits for it
    @Volatile private var session: DitskipSession? = null       // the bundle a run is training, for Stop
    private val stages = DitskipStages()                        // the subject stage and generation, for Stop
    private val core = Executors.newSingleThreadExecutor().asCoroutineDispatcher()   // every core call, one thread

    private val pickPhotos = registerForActivityResult(ActivityResultContracts.PickMultipleVisualMedia(10)) { uris ->
        photos = uris
        status.text = "${uris.size} photo(s) picked"
    }

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        val defaultBundle = File(getExternalFilesDir(null), "bundle").absolutePath
        bundlePath = EditText(this).apply { setText(intent.getStringExtra("bundle") ?: defaultBundle) }
        prompt = EditText(this).apply { setText(intent.getStringExtra("prompt") ?: "a photo of sks dog on a beach") }
        picture = ImageView(this)
        status = TextView(this).apply { text = "native core ${DitskipSession.version()}" }
        val pick = Button(this).apply {
            text = "Pick photos"
            setOnClickListener { pickPhotos.launch(PickVisualMediaRequest(ActivityResultContracts.PickVisualMedia.ImageOnly)) }
        }
        val train = Button(this).apply { text = "Train"; setOnClickListener { startTraining() } }
        val stop = Button(this).apply { text = "Stop"; setOnClickListener { session?.cancel(); stages.cancel() } }
        val draw = Button(this).apply { text = "Generate"; setOnClickListener { startGenerating() } }
        val col = LinearLayout(this).apply {
            orientation = LinearLayout.VERTICAL
            addView(bundlePath); addView(pick); addView(train); addView(stop); addView(prompt); addView(draw)
            addView(status); addView(picture)
        }
        setContentView(ScrollView(this).apply { addView(col) })
        if (intent.getBooleanExtra("autostart", false)) startTraining()
    }

    override fun onDestroy() {
        session?.cancel()
        stages.cancel()
        super.onDestroy()
    }

    private fun startTraining() {
        if (busy) return
        busy = true
        val root = File(bundlePath.text.toString())
        val runDir = intent.getStringExtra("run_dir") ?: File(root, "runs/android").absolutePath
        val picked = photos
        lifecycleScope.launch {
            status.text = try {
                withContext(core) {
                    if (isModelBundle(root)) personalizeAndTrain(root, picked) else train(root, runDir)
                }
            } catch (e: DitskipException) {
                "failed: ${e.message}"                              // the core's one line (refusal, over budget, ...)
            } catch (e: Throwable) {
                "failed: $e"
            } finally {
                busy = false
            }
        }
    }

    /** The core trains the bundle on this (the core's) thread; progress and memory are posted to the UI. */
    private fun train(root: File, runDir: String): String {
        post("verifying ${root.name} ...")
        DitskipSession(root.absolutePath).use { s ->
            session = s
            try {
                val result = s.train(TrainOptions(runDir = runDir)) { step, total, loss ->
                    val (anon, file) = DitskipSession.footprint().let { it[0] to it[1] }
                    val peak = MemoryProbe.read().hwmBytes
                    post("step $step/$total  loss ${"%.4f".format(loss)}\n" +
                         "RssAnon ${anon shr 20} MiB  RssFile ${file shr 20} MiB  peak RSS ${peak shr 20} MiB")
                    true
                }
                val lora = result.summaryJson?.let { JSONObject(it).optString("lora") } ?: ""
                return if (result.cancelled) "stopped: checkpoint in $runDir (Train resumes)" else "LoRA written: $lora"
            } finally {
                session = null
            }
        }
    }

    /** A model bundle: the picked photos, decoded upright by the platform, go to a private folder; the core's
     *  subject stage turns them into a subject bundle beside the model bundle, which the core then trains. */
    private fun personalizeAndTrain(model: File, picked: List<Uri>): String {
        val subject = subjectBundleOf(model)
        if (!File(subject, "manifest.json").isFile || picked.isNotEmpty()) {
            if (picked.isEmpty()) return "${model.name} is a model bundle: pick the subject's photos, then Train."
            val dir = File(filesDir, "photos")
            PhotoDecode.writeUpright(contentResolver, picked, dir) { i, n -> post("photo $i/$n read") }
            val stage = stages.personalize(model.absolutePath, dir.absolutePath,
                PersonalizeOptions(outDir = subject.absolutePath, overwrite = true)) { name, done, total ->
                post("$name $done/$total"); true
            }
            if (stage.cancelled) return "stopped: the subject stage continues on the next Train"
        }
        return train(subject, File(subject, "runs/android").absolutePath)
    }

    /** Generate: the selected bundle's generation programs with the run's LoRA (when it has one), on the core's thread. */
    private fun startGenerating() {
        if (busy) return
        busy = true
        val root = File(bundlePath.text.toString()).let { if (isModelBundle(it)) subjectBundleOf(it) else it }
        val lora = File(intent.getStringExtra("run_dir") ?: File(root, "runs/android").absolutePath, "lora")
        val out = File(getExternalFilesDir(null), "generated.png")
        val text = prompt.text.toString()
        lifecycleScope.launch {
            status.text = try {
                val result = withContext(core) {
                    stages.generate(root.absolutePath, text, out.absolutePath,
                        GenerateOptions(lora = if (lora.isDirectory) lora.absolutePath else null)) { name, done, total ->
                        post("$name $done/$total"); true
                    }
                }
                if (result.cancelled) "stopped" else {
                    picture.setImageBitmap(BitmapFactory.decodeFile(out.absolutePath))
                    "wrote ${out.name}" + if (lora.isDirectory) " with the trained LoRA" else " (base model: no LoRA yet)"
                }
            } catch (e: DitskipException) {
                "failed: ${e.message}"
            } catch (e: Throwable) {
                "failed: $e"
            } finally {
                busy = false
            }
        }
    }

    private fun subjectBundleOf(model: File): File = File(model.parentFile, model.name + "-subject")

    /** Whether `root`'s manifest says it is a model bundle (no photos: the subject stage runs first). */
    private fun isModelBundle(root: File): Boolean = try {
        JSONObject(File(root, "manifest.json").readText()).optString("bundle_kind") == "model"
    } catch (e: Exception) {
        false                                                      // the core says what is wrong with it
    }

    private fun post(text: String) = runOnUiThread { status.text = text }
}
