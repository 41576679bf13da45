package org.ditskip.demo

import android.net.Uri
import android.os.Bundle
import android.widget.Button
import android.widget.EditText
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
 * UI over the native runtime core: pick photos, choose a bundle, Train (the core trains it: DitskipRuntime.kt),
 * watch loss and memory, Stop. The core writes RUN/checkpoint.safetensors, RUN/lora/pytorch_lora_weights.safetensors
 * and RUN/summary.json; a second Train resumes from the checkpoint. The subject stage and generation are not in the
 * core yet (issue 56): a model bundle's picked photos are written upright to a folder for the host's
 * `python -m ditskip_edge.runtime personalize`, and Generate says where to run it. Also started by adb:
 *   adb shell am start -n org.ditskip.demo/.MainActivity --es bundle <dir> [--es run_dir <dir>] --ez autostart true
 */
class MainActivity : AppCompatActivity() {
    private lateinit var status: TextView
    private lateinit var bundlePath: EditText
    private var photos: List<Uri> = emptyList()
    private var busy = false                                    // a Train is going: a second tap waits for it
    @Volatile private var session: DitskipSession? = null       // the bundle a run is training, for Stop
    private val core = Executors.newSingleThreadExecutor().asCoroutineDispatcher()   // every core call, one thread

    private val pickPhotos = registerForActivityResult(ActivityResultContracts.PickMultipleVisualMedia(10)) { uris ->
        photos = uris
        status.text = "${uris.size} photo(s) picked"
    }

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        val defaultBundle = File(getExternalFilesDir(null), "bundle").absolutePath
        bundlePath = EditText(this).apply { setText(intent.getStringExtra("bundle") ?: defaultBundle) }
        status = TextView(this).apply { text = "native core ${DitskipSession.version()}" }
        val pick = Button(this).apply {
            text = "Pick photos"
            setOnClickListener { pickPhotos.launch(PickVisualMediaRequest(ActivityResultContracts.PickVisualMedia.ImageOnly)) }
        }
        val train = Button(this).apply { text = "Train"; setOnClickListener { startTraining() } }
        val stop = Button(this).apply { text = "Stop"; setOnClickListener { session?.cancel() } }
        val draw = Button(this).apply { text = "Generate"; setOnClickListener { status.text = NOT_IN_CORE_GENERATE } }
        val col = LinearLayout(this).apply {
            orientation = LinearLayout.VERTICAL
            addView(bundlePath); addView(pick); addView(train); addView(stop); addView(draw); addView(status)
        }
        setContentView(ScrollView(this).apply { addView(col) })
        if (intent.getBooleanExtra("autostart", false)) startTraining()
    }

    override fun onDestroy() {
        session?.cancel()
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
                    if (isModelBundle(root)) subjectStageNotInCore(root, picked) else train(root, runDir)
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

    /** A model bundle needs the subject stage first, which is not in the core yet: the picked photos are written
     *  upright (EXIF orientation applied) where the host's personalize can take them. */
    private fun subjectStageNotInCore(model: File, picked: List<Uri>): String {
        if (picked.isEmpty()) return "${model.name} is a model bundle: pick the subject's photos, then Train.\n$NOT_IN_CORE_STAGE"
        val dir = File(getExternalFilesDir(null), "photos")
        val written = PhotoDecode.writeUpright(contentResolver, picked, dir) { i, n -> post("photo $i/$n written") }
        return "${written.size} photos in ${dir.absolutePath}\n$NOT_IN_CORE_STAGE"
    }

    /** Whether `root`'s manifest says it is a model bundle (no photos: the subject stage runs first). */
    private fun isModelBundle(root: File): Boolean = try {
        JSONObject(File(root, "manifest.json").readText()).optString("bundle_kind") == "model"
    } catch (e: Exception) {
        false                                                      // the core says what is wrong with it
    }

    private fun post(text: String) = runOnUiThread { status.text = text }

    private companion object {
        const val NOT_IN_CORE_STAGE = "not in this build: run the subject stage on the host " +
            "(python -m ditskip_edge.runtime personalize MODEL_BUNDLE --photos DIR) or wait for the native core's"
        const val NOT_IN_CORE_GENERATE = "not in this build: run generation on the host " +
            "(python -m ditskip_edge.runtime generate BUNDLE --lora RUN/lora --prompt ... --out PNG) or wait for the native core's"
    }
}
