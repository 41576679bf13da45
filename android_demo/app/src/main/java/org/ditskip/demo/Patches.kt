package org.ditskip.demo

import kotlin.math.floor
import kotlin.math.max
import kotlin.math.min

/**
 * A sample's crop of a photo resized to s_min, on the phone: the Kotlin twin of ditskip_edge/runtime/patches.py
 * (PatchSampler's grid_sample: bilinear, border padding, align_corners=False pixel centres), float32 steps as there,
 * so the patch the encode program gets is the host's to float32 rounding.
 */
object Patches {
    private class Taps(val lo: IntArray, val hi: IntArray, val wLo: FloatArray, val wHi: FloatArray)

    private fun taps(start: Float, side: Float, size: Int, out: Int): Taps {
        val lo = IntArray(out); val hi = IntArray(out); val wLo = FloatArray(out); val wHi = FloatArray(out)
        for (i in 0 until out) {
            val centre = (i.toFloat() + 0.5f) / out.toFloat()
            val src = start + centre * side - 0.5f
            val g = (2f * src + 1f) / size.toFloat() - 1f
            var ix = (((g.toDouble() + 1.0) * size - 1.0) / 2.0).toFloat()
            ix = min(max(ix, 0f), (size - 1).toFloat())
            val f = floor(ix)
            val frac = ix - f
            lo[i] = f.toInt(); hi[i] = min(lo[i] + 1, size - 1)
            wHi[i] = frac; wLo[i] = 1f - frac
        }
        return Taps(lo, hi, wLo, wHi)
    }

    /** photo [3, h, w] (row-major, [-1, 1]), crop box (x0, y0, side) -> patch [1, 3, out, out]. */
    fun crop(photo: FloatArray, h: Int, w: Int, x0: Int, y0: Int, side: Int, out: Int): FloatArray {
        val ty = taps(y0.toFloat(), side.toFloat(), h, out)
        val tx = taps(x0.toFloat(), side.toFloat(), w, out)
        val res = FloatArray(3 * out * out)
        for (c in 0 until 3) {
            val base = c * h * w
            for (i in 0 until out) {
                val rn = base + ty.lo[i] * w; val rs = base + ty.hi[i] * w
                val s = ty.wLo[i]; val n = ty.wHi[i]
                for (j in 0 until out) {
                    val e = tx.wLo[j]; val wt = tx.wHi[j]
                    val nw = s * e; val ne = s * wt; val sw = n * e; val se = n * wt
                    res[(c * out + i) * out + j] = (photo[rn + tx.lo[j]] * nw + photo[rn + tx.hi[j]] * ne) +
                        photo[rs + tx.lo[j]] * sw + photo[rs + tx.hi[j]] * se
                }
            }
        }
        return res
    }
}
