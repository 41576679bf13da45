package org.ditskip.demo

import java.nio.FloatBuffer
import kotlin.math.pow
import kotlin.math.sqrt

/**
 * AdamW exactly as torch.optim.AdamW computes it (the Python runtime trainer's update, ExecuTorch ships only SGD):
 *
 *   p = p * (1 - lr * weight_decay)
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   bc1 = 1 - beta1^step ; bc2 = 1 - beta2^step
 *   p = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
 *
 * Parameters are the runtime's own memory (TrainingModule.namedParameters() wraps the planned arena in a direct
 * FloatBuffer), so the update writes in place; m and v live here (2 x 4 bytes per trainable element).
 */
class AdamW(
    var lr: Double,                   // the rate of the next update: the trainer sets lrAt(...) before each
    private val beta1: Double,
    private val beta2: Double,
    private val eps: Double,
    private val weightDecay: Double
) {
    val m = LinkedHashMap<String, FloatArray>()
    val v = LinkedHashMap<String, FloatArray>()
    var step: Long = 0
        private set

    fun restore(step: Long, moments1: Map<String, FloatArray>, moments2: Map<String, FloatArray>) {
        this.step = step
        m.clear(); m.putAll(moments1)
        v.clear(); v.putAll(moments2)
    }

    companion object {
        /** The rate of optimizer step [step] (0-based) of [steps] under the manifest's optimizer.lr_schedule
         *  (docs/bundle_contract.json adamw.lr_schedules; ditskip_edge/runtime/bundle.py OptimizerSpec.lr_at). */
        fun lrAt(lr: Double, schedule: String, step: Int, steps: Int): Double = when (schedule) {
            "constant" -> lr
            "linear" -> lr * (1.0 - step.toDouble() / steps.toDouble())
            else -> error("optimizer.${BundleContract.LR_SCHEDULE_FIELD} '$schedule': this app knows " +
                          BundleContract.LR_SCHEDULES.joinToString(", "))
        }
    }

    /** One update of every parameter from its (already accumulated) gradient. */
    fun step(params: Map<String, FloatBuffer>, grads: Map<String, FloatArray>) {
        step += 1
        val bc1 = 1.0 - beta1.pow(step.toDouble())
        val bc2 = 1.0 - beta2.pow(step.toDouble())
        val stepSize = (lr / bc1).toFloat()
        val bc2Sqrt = sqrt(bc2).toFloat()
        val decay = (1.0 - lr * weightDecay).toFloat()
        val b1 = beta1.toFloat(); val b2 = beta2.toFloat(); val e = eps.toFloat()
        for ((name, p) in params) {
            val g = grads[name] ?: error("no gradient for parameter $name")
            val mm = m.getOrPut(name) { FloatArray(g.size) }
            val vv = v.getOrPut(name) { FloatArray(g.size) }
            for (i in g.indices) {
                val pi = p.get(i) * decay
                mm[i] = b1 * mm[i] + (1f - b1) * g[i]
                vv[i] = b2 * vv[i] + (1f - b2) * g[i] * g[i]
                val denom = sqrt(vv[i]) / bc2Sqrt + e
                p.put(i, pi - stepSize * mm[i] / denom)
            }
        }
    }
}
