package org.ditskip.demo

import kotlin.math.abs
import kotlin.math.max

/**
 * The trained LoRA merged into a frozen linear at the weights' own bit width, the Kotlin twin of
 * ditskip_edge/runtime/weights.py (the layouts of ditskip_edge/quantize.py):
 *   fp32  weight [O, I];  int8  w_codes int8 [O, I] + w_scale [O, 1];
 *   int4  w_packed uint8 [O, I/2] (low nibble = even column, codes + 8) + w_scale [O, I/g, 1]
 * W' = dequantize(W) + scale * B A, requantized symmetrically: s = max|w| / ((qmax - qmin) / 2) (>= 1e-12),
 * code = clamp(rint(w * (1 / s)), qmin, qmax), in float32. B A is summed in a fixed order here and by BLAS on the
 * host, so a code may differ by one step at a rounding boundary (the JVM check bounds it).
 */
object LoraMerge {
    private const val EPS = 1e-12f

    /** Symmetric codes of w [rows, groupLen] (one scale per row of groupLen values). */
    fun quantize(w: FloatArray, rows: Int, groupLen: Int, bits: Int): Pair<ByteArray, FloatArray> {
        val qmax = if (bits == 8) 127 else 7
        val qmin = -qmax - 1
        val codes = ByteArray(w.size)
        val scales = FloatArray(rows)
        for (r in 0 until rows) {
            var m = 0f
            for (j in 0 until groupLen) m = max(m, abs(w[r * groupLen + j]))
            val s = max(m / ((qmax - qmin) / 2f), EPS)
            scales[r] = s
            val inv = 1f / s
            for (j in 0 until groupLen) {
                val q = Math.rint((w[r * groupLen + j] * inv).toDouble()).coerceIn(qmin.toDouble(), qmax.toDouble())
                codes[r * groupLen + j] = q.toInt().toByte()
            }
        }
        return codes to scales
    }

    fun dequantInt8(codes: ByteArray, scale: FloatArray, o: Int, i: Int): FloatArray =
        FloatArray(o * i) { codes[it].toFloat() * scale[it / i] }

    fun dequantInt4(packed: ByteArray, scale: FloatArray, o: Int, i: Int): FloatArray {
        val g = i / (scale.size / o)
        return FloatArray(o * i) { k ->
            val b = packed[k / 2].toInt() and 0xFF
            val q = (if (k % 2 == 0) b % 16 else b / 16) - 8
            q.toFloat() * scale[k / g]
        }
    }

    fun packInt4(codes: ByteArray): ByteArray =
        ByteArray(codes.size / 2) { k -> ((codes[2 * k] + 8) + (codes[2 * k + 1] + 8) * 16).toByte() }

    /** w [O, I] + scale * B [O, r] A [r, I], in place. */
    fun addLora(w: FloatArray, a: FloatArray, b: FloatArray, o: Int, i: Int, r: Int, scale: Float) {
        for (row in 0 until o) for (col in 0 until i) {
            var d = 0f
            for (k in 0 until r) d += b[row * r + k] * a[k * i + col]
            w[row * i + col] += scale * d
        }
    }

    /** The merged states of one linear: name ("weight" | "w_codes" | "w_packed" | "w_scale") -> (dtype, shape, bytes). */
    fun merge(states: Map<String, RawTensor>, a: FloatArray, b: FloatArray, rank: Int, scale: Float,
              group: Int): Map<String, Triple<String, LongArray, ByteArray>> {
        val out = LinkedHashMap<String, Triple<String, LongArray, ByteArray>>()
        states["weight"]?.let { wt ->
            val (o, i) = wt.shape[0].toInt() to wt.shape[1].toInt()
            val w = wt.floats(); addLora(w, a, b, o, i, rank, scale)
            out["weight"] = Triple("F32", wt.shape, Safetensors.f32Bytes(w))
            return out
        }
        val sc = states.getValue("w_scale")
        states["w_codes"]?.let { ct ->
            val (o, i) = ct.shape[0].toInt() to ct.shape[1].toInt()
            val w = dequantInt8(ct.rawBytes(), sc.floats(), o, i); addLora(w, a, b, o, i, rank, scale)
            val (codes, s) = quantize(w, o, i, 8)
            out["w_codes"] = Triple("I8", ct.shape, codes)
            out["w_scale"] = Triple("F32", sc.shape, Safetensors.f32Bytes(s))
            return out
        }
        val pt = states.getValue("w_packed")
        val (o, i) = pt.shape[0].toInt() to 2 * pt.shape[1].toInt()
        val w = dequantInt4(pt.rawBytes(), sc.floats(), o, i); addLora(w, a, b, o, i, rank, scale)
        val g = if (i % group == 0) group else i
        val (codes, s) = quantize(w, o * i / g, g, 4)
        out["w_packed"] = Triple("U8", pt.shape, packInt4(codes))
        out["w_scale"] = Triple("F32", sc.shape, Safetensors.f32Bytes(s))
        return out
    }
}
