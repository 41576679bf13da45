package org.ditskip.demo

import kotlin.math.exp
import kotlin.math.pow

/**
 * The generation sampler, the Kotlin twin of ditskip_edge/runtime/sampler.py: FlowMatchEulerDiscreteScheduler's
 * sigmas as FluxPipeline drives it (linspace(1, 1/N, N) in float32, shifted, then 0) and the guided Euler step
 * x += (sigma_next - sigma) * (v_u + g (v_c - v_u)), all in float32.
 */
object Sampler {
    fun sigmas(steps: Int, shift: Float, dynamic: Boolean, mu: Double?, timeShiftType: String): FloatArray {
        require(steps >= 1) { "steps $steps: expected >= 1" }
        val out = FloatArray(steps + 1)
        for (i in 0 until steps) {
            // numpy linspace: start + i * step in float64, the last value exactly the end; then float32
            val s = (if (i == steps - 1) 1.0 / steps else 1.0 + i * ((1.0 / steps - 1.0) / (steps - 1))).toFloat()
            out[i] = when {
                dynamic && timeShiftType == "exponential" -> { val e = exp(mu!!).toFloat(); e / (e + (1f / s - 1f).pow(1f)) }
                dynamic && timeShiftType == "linear" -> { val m = mu!!.toFloat(); m / (m + (1f / s - 1f).pow(1f)) }
                dynamic -> error("time_shift_type $timeShiftType is not supported")
                else -> shift * s / (1f + (shift - 1f) * s)
            }
        }
        return out
    }

    /** x += (sigmaNext - sigma) * (vu + g (vc - vu)), in place; vUncond null (guidance 1: the cond branch alone):
     *  x += (sigmaNext - sigma) * vc. */
    fun guidedEulerStep(x: FloatArray, vUncond: FloatArray?, vCond: FloatArray, guidance: Float, sigma: Float, sigmaNext: Float) {
        val dt = sigmaNext - sigma
        for (i in x.indices) {
            val vc = vCond[i]
            x[i] = x[i] + dt * (if (vUncond == null) vc else vUncond[i] + guidance * (vc - vUncond[i]))
        }
    }
}
