package org.ditskip.demo

import kotlin.math.PI
import kotlin.math.cos
import kotlin.math.ln
import kotlin.math.sqrt

/**
 * The portable noise RNG, the Kotlin twin of ditskip_edge/rng.py (splitmix64 + Box-Muller, cos branch only).
 * The residual cache was computed for exactly this noise, so it must match the host bit for bit in the uint64
 * words and to float32 rounding in the normals. Kotlin's Long arithmetic wraps like uint64; `ushr` is the logical
 * shift. Self-check against the contract's values: [selfCheck].
 */
object PortableRng {
    private const val GOLDEN: Long = -0x61c8864680b583ebL      // 0x9E3779B97F4A7C15
    private const val MIX1: Long = -0x40a7b892e31b1a47L        // 0xBF58476D1CE4E5B9
    private const val MIX2: Long = -0x6b2fb644ecceee15L        // 0x94D049BB133111EB
    private const val TWO_POW_M53: Double = 1.0 / 9007199254740992.0   // 2^-53

    fun splitmix64(x: Long): Long {
        var z = x
        z = (z xor (z ushr 30)) * MIX1
        z = (z xor (z ushr 27)) * MIX2
        return z xor (z ushr 31)
    }

    /** word(i): the raw 64-bit word for counter i (rng.words). */
    fun word(seed: Long, i: Long): Long = splitmix64(seed + (i + 1) * GOLDEN)

    /** uniform(i) in (0, 1) for counter i. */
    fun uniform(seed: Long, i: Long): Double {
        val word = word(seed, i)
        return ((word ushr 11).toDouble() + 0.5) * TWO_POW_M53
    }

    /** count standard normals; element i from counters 2i and 2i+1 (row-major order of the tensor). */
    fun normal(seed: Long, count: Int): FloatArray {
        val out = FloatArray(count)
        for (i in 0 until count) {
            val u1 = uniform(seed, 2L * i)
            val u2 = uniform(seed, 2L * i + 1)
            out[i] = (sqrt(-2.0 * ln(u1)) * cos(2.0 * PI * u2)).toFloat()
        }
        return out
    }

    /** True when this build reproduces the host's first normals for the contract's check seed. */
    fun selfCheck(): Boolean {
        val expect = BundleContract.RNG_CHECK_NORMALS
        val got = normal(BundleContract.RNG_CHECK_SEED.toLong(), expect.size)
        return expect.indices.all { kotlin.math.abs(got[it] - expect[it].toFloat()) <= 1e-6f }
    }
}
