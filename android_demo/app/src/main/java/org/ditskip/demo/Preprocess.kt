package org.ditskip.demo

import android.content.Context
import android.graphics.Bitmap
import android.graphics.ImageDecoder
import android.net.Uri
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor
import java.io.File

/**
 * Device-side preprocessing: the user's photo + the sample's crop box -> clean latents x0, with the bundle's
 * preprocessing program (dynamic patch sampling + the autoencoder's encoder, issue 5) when the manifest has one
 * (programs.executorch.preprocess = {path, method}); otherwise the app uses the host-computed x0 in the cache entry.
 * Photos are normalised as the host does: RGB, [-1, 1], CHW, row-major.
 */
class Preprocess(context: Context, private val bundle: TrainingBundle, private val photos: List<Uri>) {
    private val section = bundle.etSection.optJSONObject("preprocess")
    private val module: Module? = section?.let {
        Module.load(File(File(bundle.root, BundleContract.ET_PROGRAM_DIR), it.getString("path")).absolutePath)
    }
    private val resolver = context.contentResolver
    private val cache = HashMap<Int, Pair<LongArray, FloatArray>>()

    val available: Boolean get() = module != null && photos.isNotEmpty()

    fun x0(s: Sample): FloatArray? {
        val m = module ?: return null
        require(s.photo < photos.size) { "the schedule uses photo ${s.photo}: pick the bundle's ${bundle.manifest.getJSONObject("subject_stage").getJSONArray("photos").length()} photos" }
        val (shape, pixels) = cache.getOrPut(s.photo) { load(photos[s.photo]) }
        val box = floatArrayOf(s.cropBox[0].toFloat(), s.cropBox[1].toFloat(), s.cropBox[2].toFloat())
        val out = m.execute(section!!.optString("method", "forward"),
                            EValue.from(Tensor.fromBlob(pixels, shape)), EValue.from(Tensor.fromBlob(box, longArrayOf(3))))
        return out[0].toTensor().dataAsFloatArray
    }

    private fun load(uri: Uri): Pair<LongArray, FloatArray> {
        val bmp = ImageDecoder.decodeBitmap(ImageDecoder.createSource(resolver, uri)) { d, _, _ ->
            d.allocator = ImageDecoder.ALLOCATOR_SOFTWARE
        }.copy(Bitmap.Config.ARGB_8888, false)
        val w = bmp.width; val h = bmp.height
        val px = IntArray(w * h); bmp.getPixels(px, 0, w, 0, 0, w, h)
        val out = FloatArray(3 * w * h)
        for (i in px.indices) {
            val c = px[i]
            out[i] = ((c shr 16) and 0xFF) / 127.5f - 1f
            out[w * h + i] = ((c shr 8) and 0xFF) / 127.5f - 1f
            out[2 * w * h + i] = (c and 0xFF) / 127.5f - 1f
        }
        return longArrayOf(1, 3, h.toLong(), w.toLong()) to out
    }
}
