package org.ditskip.demo

/**
 * runtime/photos.py `normalise`: an 8-bit RGB photo whose short side is above the data resolution is resized (aspect
 * kept, each side round(side * data_px / short), at least data_px) with Pillow's LANCZOS, then scaled to [-1, 1].
 * The resize is a port of Pillow's `ImagingResample` for 8-bit images (libImaging/Resample.c): separable, horizontal
 * pass then vertical pass, each output pixel a window of the input around center = (x + 0.5) * scale, filter
 * sinc(x) sinc(x / 3) on [-3, 3) stretched by max(scale, 1), coefficients normalised to sum 1 and turned into fixed
 * point with PRECISION_BITS = 32 - 8 - 2 (round half away from zero), accumulated from 1 << (PRECISION_BITS - 1),
 * shifted back and clipped to 0..255 after each pass. Android's Bitmap.createScaledBitmap is not this filter.
 */
object PhotoNormalise {
    const val PRECISION_BITS = 32 - 8 - 2
    private const val LANCZOS_SUPPORT = 3.0

    private fun sinc(x: Double): Double {
        if (x == 0.0) return 1.0
        val y = x * Math.PI
        return Math.sin(y) / y
    }

    private fun lanczos(x: Double): Double = if (-3.0 <= x && x < 3.0) sinc(x) * sinc(x / 3.0) else 0.0

    /** Resample.c precompute_coeffs + normalize_coeffs_8bpc: per output pixel its first input pixel and count
     *  (`bounds` [out, 2]) and `ksize` fixed-point weights. */
    private class Coeffs(val ksize: Int, val bounds: IntArray, val kk: IntArray)

    private fun coeffs(inSize: Int, outSize: Int): Coeffs {
        val scale = inSize.toDouble() / outSize
        val filterscale = if (scale < 1.0) 1.0 else scale
        val support = LANCZOS_SUPPORT * filterscale
        val ksize = Math.ceil(support).toInt() * 2 + 1
        val pre = DoubleArray(outSize * ksize)
        val bounds = IntArray(outSize * 2)
        val ss = 1.0 / filterscale
        for (xx in 0 until outSize) {
            val center = (xx + 0.5) * scale
            var ww = 0.0
            var xmin = (center - support + 0.5).toInt()
            if (xmin < 0) xmin = 0
            var xmax = (center + support + 0.5).toInt()
            if (xmax > inSize) xmax = inSize
            xmax -= xmin
            for (x in 0 until xmax) {
                val w = lanczos((x + xmin - center + 0.5) * ss)
                pre[xx * ksize + x] = w
                ww += w
            }
            if (ww != 0.0) for (x in 0 until xmax) pre[xx * ksize + x] /= ww
            bounds[2 * xx] = xmin
            bounds[2 * xx + 1] = xmax
        }
        val one = (1 shl PRECISION_BITS).toDouble()
        val kk = IntArray(pre.size) { if (pre[it] < 0) (-0.5 + pre[it] * one).toInt() else (0.5 + pre[it] * one).toInt() }
        return Coeffs(ksize, bounds, kk)
    }

    private fun clip8(v: Int): Int { val s = v shr PRECISION_BITS; return if (s < 0) 0 else if (s > 255) 255 else s }

    /** Pillow's im.resize((outW, outH), Image.LANCZOS) of an RGB image: `rgb` [h, w, 3] uint8 -> [outH, outW, 3]. */
    fun resizeLanczos(rgb: ByteArray, h: Int, w: Int, outH: Int, outW: Int): ByteArray {
        var img = rgb
        var curW = w
        if (outW != w) {                                            // horizontal pass
            val c = coeffs(w, outW)
            val tmp = ByteArray(h * outW * 3)
            for (y in 0 until h) for (xx in 0 until outW) {
                val xmin = c.bounds[2 * xx]; val xmax = c.bounds[2 * xx + 1]; val k = xx * c.ksize
                for (ch in 0 until 3) {
                    var ss = 1 shl (PRECISION_BITS - 1)
                    for (x in 0 until xmax) ss += (img[(y * w + x + xmin) * 3 + ch].toInt() and 0xFF) * c.kk[k + x]
                    tmp[(y * outW + xx) * 3 + ch] = clip8(ss).toByte()
                }
            }
            img = tmp
            curW = outW
        }
        if (outH != h) {                                            // vertical pass
            val c = coeffs(h, outH)
            val tmp = ByteArray(outH * curW * 3)
            for (yy in 0 until outH) {
                val ymin = c.bounds[2 * yy]; val ymax = c.bounds[2 * yy + 1]; val k = yy * c.ksize
                for (x in 0 until curW) for (ch in 0 until 3) {
                    var ss = 1 shl (PRECISION_BITS - 1)
                    for (y in 0 until ymax) ss += (img[((y + ymin) * curW + x) * 3 + ch].toInt() and 0xFF) * c.kk[k + y]
                    tmp[(yy * curW + x) * 3 + ch] = clip8(ss).toByte()
                }
            }
            img = tmp
        }
        return img
    }

    /** photos.py normalise's size rule: (h, w) after normalisation to `dataPx` (unchanged when the short side is not
     *  above it). Python's round (half to even) of side * (dataPx / short). */
    fun normalisedSize(h: Int, w: Int, dataPx: Int): IntArray {
        val short = Math.min(h, w)
        if (short <= dataPx) return intArrayOf(h, w)
        val scale = dataPx.toDouble() / short
        return intArrayOf(Math.max(dataPx, Math.rint(h * scale).toInt()), Math.max(dataPx, Math.rint(w * scale).toInt()))
    }

    /** photos.py normalise: `rgb` [h, w, 3] uint8 -> its size [h', w'] and pixels [3, h', w'] float32 in [-1, 1]. */
    fun normalise(rgb: ByteArray, h: Int, w: Int, dataPx: Int): Pair<IntArray, FloatArray> {
        val hw = normalisedSize(h, w, dataPx)
        val px = if (hw[0] == h && hw[1] == w) rgb else resizeLanczos(rgb, h, w, hw[0], hw[1])
        val n = hw[0] * hw[1]
        val out = FloatArray(3 * n)
        for (i in 0 until n) for (c in 0 until 3) out[c * n + i] = (px[i * 3 + c].toInt() and 0xFF).toFloat() / 127.5f - 1f
        return Pair(hw, out)
    }

    /** A photo file's name, the SHA-256 of its bytes and its decoded RGB -> the subject stage's photo. */
    fun photo(name: String, sha256: String, rgb: ByteArray, h: Int, w: Int, dataPx: Int): SubjectPhoto {
        val (hw, px) = normalise(rgb, h, w, dataPx)
        return SubjectPhoto(name, sha256, hw[0], hw[1], px)
    }
}
