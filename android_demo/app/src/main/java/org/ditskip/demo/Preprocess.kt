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
 * preprocessing programs (dynamic patch sampling + the autoencoder's encoder, issue 5: manifest `programs` entries
 * named "preprocess", one per photo size, inputs photo [1, 3, H, W] and crop_box [3]); without them, or without
 * picked photos, the app uses the host-computed x0 in the cache entry. The photos must be the bundle's, in its order
 * (the residual cache was computed for them), normalised as the host does: RGB, [-1, 1], CHW, row-major, and at the
 * bundle's normalised size (subject/photos/*.png are that size: pick those when in doubt).
 */
class Preprocess(context: Context, private val bundle: TrainingBundle, private val photos: List<Uri>) {
    private val resolver = context.contentResolver
    private val pixels = HashMap<Int, Pair<LongArray, FloatArray>>()
    private val modules = HashMap<List<Long>, Module>()

    val available: Boolean get() = photos.isNotEmpty() && bundle.program(BundleContract.ET_PREPROCESS) != null

    fun x0(s: Sample): FloatArray? {
        if (!available) return null
        require(s.photo < photos.size) { "the schedule uses photo ${s.photo}: pick the bundle's ${bundle.manifest.getJSONObject("subject_stage").getJSONArray("photos").length()} photos" }
        val (shape, px) = pixels.getOrPut(s.photo) { load(photos[s.photo]) }
        val hw = shape.drop(2)
        val m = modules.getOrPut(hw) {
            val prog = bundle.program(BundleContract.ET_PREPROCESS) { p ->
                val sh = p.getJSONArray(BundleContract.ET_INPUTS_FIELD).getJSONObject(0).getJSONArray("shape")
                sh.getLong(2) == hw[0] && sh.getLong(3) == hw[1]
            } ?: error("no preprocess program for photos of ${hw[0]}x${hw[1]} px: pick the bundle's normalised photos")
            Module.load(File(bundle.root, prog.getString(BundleContract.ET_PROGRAM_FIELD)).absolutePath)
        }
        val box = floatArrayOf(s.cropBox[0].toFloat(), s.cropBox[1].toFloat(), s.cropBox[2].toFloat())
        val out = m.forward(EValue.from(Tensor.fromBlob(px, shape)), EValue.from(Tensor.fromBlob(box, longArrayOf(3))))
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
