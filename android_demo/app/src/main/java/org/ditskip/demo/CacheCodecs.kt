package org.ditskip.demo

import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.math.abs
import kotlin.math.max
import kotlin.math.min
import kotlin.math.sqrt

/** One stored part of a cache entry: its dtype ("float32", "int8", "uint8"), shape and little-endian bytes. */
class EncodedPart(val dtype: String, val shape: IntArray, val bytes: ByteArray)

/** A float32 tensor in C order (x0, streams, residuals). */
class FloatTensor(val shape: IntArray, val data: FloatArray) {
    init { require(shape.fold(1) { a, b -> a * b } == data.size) { "tensor shape ${shape.toList()} holds ${data.size} values" } }
}

/**
 * One residual's codec (ditskip_edge/runtime/cache_format.py TensorCodec): kind fp32 | fp16 | int8 | int4 | lowrank,
 * the axis one scale spans ("token": groups of channels within a token, "channel": groups of tokens within a
 * channel), the group size (0: the whole axis), the rank (lowrank).
 */
class TensorCodec(val kind: String, val axis: String = "token", val group: Int = 0, val rank: Int = 0) {
    val spec: String
        get() = when {
            kind == "fp32" || kind == "fp16" -> kind
            kind == "int8" && group == 0 -> "int8-$axis"
            kind == "int8" || kind == "int4" -> "$kind-${if (axis == "token") "g" else "t"}$group"
            else -> "lowrank-r$rank"
        }

    /** [B, N, D] as scale groups: token -> [B, N, D/g, g]; channel -> [B, N/g, g, D] (g not dividing: whole axis). */
    fun groupShape(shape: IntArray): IntArray {
        val (b, n, d) = Triple(shape[0], shape[1], shape[2])
        if (axis == "channel") {
            val g = if (group != 0 && n % group == 0) group else n
            return intArrayOf(b, n / g, g, d)
        }
        val g = if (group != 0 && d % group == 0) group else d
        return intArrayOf(b, n, d / g, g)
    }

    /** The stored parts of a tensor of this shape, in cache_format.py's order: part -> (dtype, shape). */
    fun parts(shape: IntArray): LinkedHashMap<String, Pair<String, IntArray>> {
        val (b, n, d) = Triple(shape[0], shape[1], shape[2])
        val out = LinkedHashMap<String, Pair<String, IntArray>>()
        when (kind) {
            "fp32" -> out["values"] = Pair("float32", intArrayOf(b, n, d))
            "fp16" -> out["values"] = Pair("uint8", intArrayOf(b, n, 2 * d))
            "int8", "int4" -> {
                val gs = groupShape(shape)
                val scale = if (axis == "channel") intArrayOf(gs[0], gs[1], 1, gs[3]) else intArrayOf(gs[0], gs[1], gs[2], 1)
                out["codes"] = if (kind == "int8") Pair("int8", intArrayOf(b, n, d)) else Pair("uint8", intArrayOf(b, n, d / 2))
                out["scale"] = Pair("float32", scale)
            }
            else -> {
                val r = min(rank, min(n, d))
                out["u.codes"] = Pair("int8", intArrayOf(b, n, r)); out["u.scale"] = Pair("float32", intArrayOf(b, 1, r))
                out["v.codes"] = Pair("int8", intArrayOf(b, r, d)); out["v.scale"] = Pair("float32", intArrayOf(b, r, 1))
            }
        }
        return out
    }

    fun check(name: String, shape: IntArray) {
        require(shape.size == 3) { "residual '$name': expected [B, N, D], got shape ${shape.toList()}" }
        require(!(kind == "int4" && shape[2] % 2 != 0)) { "residual '$name': int4 packs channel pairs, D = ${shape[2]} is odd" }
    }

    companion object {
        private val GROUPED = Regex("(int[48])-([gt])(\\d+)")
        private val LOWRANK = Regex("lowrank-r(\\d+)")

        fun parse(text: String): TensorCodec {
            val s = text.trim()
            if (s == "fp32" || s == "fp16") return TensorCodec(s)
            if (s == "int8-token" || s == "int8-channel") return TensorCodec("int8", axis = s.substring(5))
            GROUPED.matchEntire(s)?.let { m ->
                val g = m.groupValues[3].toInt()
                require(g >= 2 && g % 2 == 0 && g <= (1 shl 20)) { "cache codec '$s': group size must be an even number in [2, ${1 shl 20}]" }
                return TensorCodec(m.groupValues[1], axis = if (m.groupValues[2] == "g") "token" else "channel", group = g)
            }
            LOWRANK.matchEntire(s)?.let { m ->
                val r = m.groupValues[1].toInt()
                require(r in 1..4096) { "cache codec '$s': rank must be in [1, 4096]" }
                return TensorCodec("lowrank", rank = r)
            }
            throw IllegalArgumentException("unknown cache codec '$s': expected fp32, fp16, int8-token, int8-channel, " +
                "int8-gG, int8-tG, int4-gG, int4-tG, lowrank-rR (or 'DEFAULT,name=CODEC,...')")
        }
    }
}

/** A cache's codec: a default plus per-residual overrides ("int8-channel,front.txt=fp16"), cache_format.py's CacheCodec. */
class CacheCodec(val default: TensorCodec, val overrides: List<Pair<String, TensorCodec>>) {
    val spec: String get() = (listOf(default.spec) + overrides.map { "${it.first}=${it.second.spec}" }).joinToString(",")

    /** The last override for this name wins, as Python's dict(overrides). */
    fun forName(name: String): TensorCodec = overrides.lastOrNull { it.first == name }?.second ?: default

    /** Every stored part of an entry, flat and in order: "x0", then each residual's parts "<name>.<part>". */
    fun parts(shapes: Map<String, IntArray>): LinkedHashMap<String, Pair<String, IntArray>> {
        val out = LinkedHashMap<String, Pair<String, IntArray>>()
        for ((name, shape) in shapes) {
            if (name == BundleContract.X0_KEY) { out[name] = Pair("float32", shape); continue }
            val c = forName(name)
            c.check(name, shape)
            for ((p, v) in c.parts(shape)) out["$name.$p"] = v
        }
        return out
    }

    /** Refuse, before any work, a codec this app cannot encode (lowrank: no SVD here), naming the codec. */
    fun requireEncodable(residuals: Collection<String>) {
        for (name in residuals) {
            val c = forName(name)
            require(c.kind != "lowrank") {
                "cache codec ${c.spec} (residual $name, bundle codec '$spec'): this app has no lowrank (SVD) encoder; " +
                    "run the subject stage with the Python runtime, or compile the model bundle with another --cache-codec"
            }
        }
    }

    companion object {
        fun parse(spec: String): CacheCodec {
            val items = spec.split(",").map { it.trim() }.filter { it.isNotEmpty() }
            val defaults = items.filter { "=" !in it }
            require(defaults.size == 1) { "cache codec '$spec': give exactly one default codec, e.g. 'int8-channel' or 'int8-channel,front.txt=lowrank-r8'" }
            val over = items.filter { "=" in it }.map { val k = it.indexOf('='); Pair(it.substring(0, k).trim(), TensorCodec.parse(it.substring(k + 1))) }
            return CacheCodec(TensorCodec.parse(defaults[0]), over)
        }
    }
}

/**
 * The device's residual encoders, bit for bit runtime/codecs.py `encode_entry` (the host's arithmetic): symmetric
 * quantization, code = round_half_even(d / scale), scale = max(absmax / qmax, 1e-12) in float32 over the scale's group
 * (qmax 127 int8, 7 int4); int4 packed two a byte (low nibble = even channel, value = nibble - 8); fp16 = the value
 * clipped to +-65504, rounded to binary16 (half to even), as two little-endian bytes. lowrank is refused.
 */
object CodecEncoder {
    const val FP16_MAX = 65504.0f
    const val MIN_SCALE = 1e-12f

    /** {"x0", residual name: tensor} -> every stored part, flat ("x0", "front.img.codes", ...). */
    fun encodeEntry(codec: CacheCodec, tensors: Map<String, FloatTensor>): LinkedHashMap<String, EncodedPart> {
        val out = LinkedHashMap<String, EncodedPart>()
        for ((name, t) in tensors) {
            if (name == BundleContract.X0_KEY) { out[name] = EncodedPart("float32", t.shape, f32Bytes(t.data)); continue }
            val c = codec.forName(name)
            c.check(name, t.shape)
            for ((p, v) in encodeTensor(c, t)) out["$name.$p"] = v
        }
        return out
    }

    fun encodeTensor(c: TensorCodec, t: FloatTensor): LinkedHashMap<String, EncodedPart> {
        val out = LinkedHashMap<String, EncodedPart>()
        val (b, n, d) = Triple(t.shape[0], t.shape[1], t.shape[2])
        when (c.kind) {
            "fp32" -> out["values"] = EncodedPart("float32", t.shape, f32Bytes(t.data))
            "fp16" -> {
                val bytes = ByteArray(2 * t.data.size)
                for (i in t.data.indices) {
                    val h = halfBits(max(-FP16_MAX, min(t.data[i], FP16_MAX)))
                    bytes[2 * i] = (h and 0xFF).toByte(); bytes[2 * i + 1] = ((h ushr 8) and 0xFF).toByte()
                }
                out["values"] = EncodedPart("uint8", intArrayOf(b, n, 2 * d), bytes)
            }
            "int8", "int4" -> {
                val (q, scale, scaleShape) = quantize(c, t)
                if (c.kind == "int8") {
                    out["codes"] = EncodedPart("int8", t.shape, ByteArray(q.size) { q[it].toByte() })
                } else {
                    val packed = ByteArray(q.size / 2) { ((q[2 * it] + 8) + 16 * (q[2 * it + 1] + 8)).toByte() }
                    out["codes"] = EncodedPart("uint8", intArrayOf(b, n, d / 2), packed)
                }
                out["scale"] = EncodedPart("float32", scaleShape, f32Bytes(scale))
            }
            else -> throw IllegalArgumentException("cache codec ${c.spec}: this app has no lowrank (SVD) encoder")
        }
        return out
    }

    /** Codes (C order, as ints in [-qmax, qmax]), scales, scale shape. */
    private fun quantize(c: TensorCodec, t: FloatTensor): Triple<IntArray, FloatArray, IntArray> {
        val qmax = if (c.kind == "int8") 127f else 7f
        val gs = c.groupShape(t.shape)
        val d = t.shape[2]
        val channel = c.axis == "channel"
        // channel: scale [B, N/g, 1, D], group (b, j, :, x); token: scale [B, N, D/g, 1], group (b, n, j, :)
        val scaleShape = if (channel) intArrayOf(gs[0], gs[1], 1, gs[3]) else intArrayOf(gs[0], gs[1], gs[2], 1)
        val scale = FloatArray(scaleShape.fold(1) { a, x -> a * x })
        fun scaleIndex(flat: Int): Int {
            val x = flat % d; val row = flat / d                      // row = b * N + n
            return if (channel) {
                val b = row / t.shape[1]; val n = row % t.shape[1]
                (b * gs[1] + n / gs[2]) * d + x
            } else row * gs[2] + x / gs[3]
        }
        val absmax = FloatArray(scale.size)
        for (i in t.data.indices) { val k = scaleIndex(i); absmax[k] = max(absmax[k], abs(t.data[i])) }
        for (k in scale.indices) scale[k] = max(absmax[k] / qmax, MIN_SCALE)
        val q = IntArray(t.data.size) { i ->
            val r = Math.rint((t.data[i] / scale[scaleIndex(i)]).toDouble())          // float32 quotient, half to even
            max(-qmax.toDouble(), min(r, qmax.toDouble())).toInt()
        }
        return Triple(q, scale, scaleShape)
    }

    /** float32 -> IEEE binary16 bits, round half to even (numpy's astype(float16)). */
    fun halfBits(f: Float): Int {
        val x = java.lang.Float.floatToRawIntBits(f)
        val sign = (x ushr 16) and 0x8000
        val exp = (x ushr 23) and 0xFF
        val mant = x and 0x7FFFFF
        if (exp == 0xFF) return sign or 0x7C00 or (if (mant != 0) 0x200 else 0)
        val e = exp - 127 + 15
        if (e >= 0x1F) return sign or 0x7C00
        if (e <= 0) {                                                  // a binary16 subnormal: M * 2^-24
            val s = 126 - exp
            if (s > 24) return sign
            val full = mant or 0x800000
            val q = full ushr s
            val rem = full and ((1 shl s) - 1)
            val half = 1 shl (s - 1)
            return sign or (if (rem > half || (rem == half && (q and 1) == 1)) q + 1 else q)
        }
        val lower = mant and 0x1FFF
        val h = (e shl 10) or (mant ushr 13)
        return sign or (if (lower > 0x1000 || (lower == 0x1000 && (h and 1) == 1)) h + 1 else h)
    }

    fun halfToFloat(h: Int): Float {
        val sign = if (h and 0x8000 != 0) -1f else 1f
        val e = (h ushr 10) and 0x1F
        val m = h and 0x3FF
        return when (e) {
            0 -> sign * m * (1f / 16777216f)                            // m * 2^-24
            0x1F -> if (m == 0) sign * Float.POSITIVE_INFINITY else Float.NaN
            else -> sign * java.lang.Float.intBitsToFloat(((e - 15 + 127) shl 23) or (m shl 13))
        }
    }

    /** Stored parts -> the float32 residual (what the program decodes in-graph): for the coding error the index keeps. */
    fun decodeTensor(c: TensorCodec, parts: Map<String, EncodedPart>, shape: IntArray): FloatArray {
        val n = shape.fold(1) { a, b -> a * b }
        fun floats(p: EncodedPart): FloatArray {
            val out = FloatArray(p.bytes.size / 4)
            ByteBuffer.wrap(p.bytes).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out)
            return out
        }
        return when (c.kind) {
            "fp32" -> floats(parts.getValue("values"))
            "fp16" -> { val b = parts.getValue("values").bytes
                FloatArray(n) { halfToFloat((b[2 * it].toInt() and 0xFF) or ((b[2 * it + 1].toInt() and 0xFF) shl 8)) } }
            "int8", "int4" -> {
                val codes = parts.getValue("codes").bytes
                val scale = floats(parts.getValue("scale"))
                val gs = c.groupShape(shape)
                val d = shape[2]
                FloatArray(n) { i ->
                    val q = if (c.kind == "int8") codes[i].toFloat() else {
                        val byte = codes[i / 2].toInt() and 0xFF
                        ((if (i % 2 == 0) byte and 0xF else byte ushr 4) - 8).toFloat()
                    }
                    val x = i % d; val row = i / d
                    val k = if (c.axis == "channel") ((row / shape[1]) * gs[1] + (row % shape[1]) / gs[2]) * d + x
                            else row * gs[2] + x / gs[3]
                    q * scale[k]
                }
            }
            else -> throw IllegalArgumentException("cache codec ${c.spec}: this app has no lowrank decoder")
        }
    }

    /** ||dHat - d|| / max(||d||, 1e-30) (runtime/codecs.py relative_error; norms in float64 here, float32 there). */
    fun relativeError(dHat: FloatArray, d: FloatArray): Double {
        var num = 0.0; var den = 0.0
        for (i in d.indices) { val e = (dHat[i] - d[i]).toDouble(); num += e * e; den += d[i].toDouble() * d[i] }
        return (sqrt(num) / max(sqrt(den), 1e-30)).toFloat().toDouble()
    }

    fun f32Bytes(a: FloatArray): ByteArray {
        val bb = ByteBuffer.allocate(4 * a.size).order(ByteOrder.LITTLE_ENDIAN)
        bb.asFloatBuffer().put(a)
        return bb.array()
    }
}
