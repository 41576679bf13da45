package org.ditskip.demo

import java.security.MessageDigest

/**
 * The built-in tiny models' hash text encoder, the Kotlin twin of ditskip_edge/runtime/hash_text.py: each lower-cased
 * [a-z0-9]+ word seeds PortableRng with the first 8 bytes of its SHA-256 (little-endian, top bit cleared), plus fixed
 * positional vectors; pooled (FLUX) = mean of the words' vectors, txt_mask (SANA) = 1 on words. Not a network.
 */
object HashText {
    const val POSITION_SEED = 1234L
    const val POSITION_SCALE = 0.1f
    private val WORD = Regex("[a-z0-9]+")

    fun words(prompt: String): List<String> = WORD.findAll(prompt.toLowerCase(java.util.Locale.ROOT)).map { it.value }.toList()

    fun wordSeed(word: String): Long {
        val d = MessageDigest.getInstance("SHA-256").digest(word.toByteArray(Charsets.UTF_8))
        var v = 0L
        for (i in 7 downTo 0) v = (v shl 8) or (d[i].toLong() and 0xFF)
        return v and Long.MAX_VALUE
    }

    /** cond.<key> -> (shape, values) for one prompt, batch 1. */
    fun encode(prompt: String, arch: String, seqLen: Int, dim: Int, pooledDim: Int): Map<String, Pair<LongArray, FloatArray>> {
        val ws = words(prompt).take(seqLen)
        val pos = PortableRng.normal(POSITION_SEED, seqLen * dim)
        val txt = FloatArray(seqLen * dim)
        val mask = FloatArray(seqLen)
        for ((i, w) in ws.withIndex()) {
            val v = PortableRng.normal(wordSeed(w), dim)
            for (j in 0 until dim) txt[i * dim + j] = v[j] + pos[i * dim + j] * POSITION_SCALE
            mask[i] = 1f
        }
        val out = linkedMapOf("cond.txt" to (longArrayOf(1, seqLen.toLong(), dim.toLong()) to txt))
        if (arch == "flux") {
            val pooled = FloatArray(pooledDim)
            for (w in ws) { val v = PortableRng.normal(wordSeed(w), pooledDim); for (j in 0 until pooledDim) pooled[j] += v[j] }
            if (ws.isNotEmpty()) for (j in 0 until pooledDim) pooled[j] /= ws.size.toFloat()
            out["cond.pooled"] = longArrayOf(1, pooledDim.toLong()) to pooled
        } else {
            out["cond.txt_mask"] = longArrayOf(1, seqLen.toLong()) to mask
        }
        return out
    }
}
