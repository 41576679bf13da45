package org.ditskip.demo

import kotlin.math.PI
import kotlin.math.cos
import kotlin.math.exp
import kotlin.math.floor
import kotlin.math.ln
import kotlin.math.max
import kotlin.math.min
import kotlin.math.round
import kotlin.math.sqrt

/** The schedule's parameters (manifest `schedule`, schedule.json `config`). */
data class ScheduleConfig(val steps: Int, val gradAccum: Int, val sMinPx: Int, val sMaxPx: Int, val multiplePx: Int,
                          val seed: Long, val tSampling: String, val dynamicPatches: Boolean)

/** One scheduled sample as the schedule computes it (t in float64, as schedule.json stores it). */
data class PlannedSample(val index: Int, val photo: Int, val t: Double, val x0: Int, val y0: Int, val side: Int,
                         val noiseSeed: Long)

/**
 * The training schedule computed on the phone from the photos' sizes: the Kotlin twin of
 * ditskip_edge/runtime/schedule.py (schedule algorithm BundleContract.SCHEDULE_ALGORITHM, docs/bundle_contract.md).
 * Every draw is PortableRng's uniform / word at a counter: sample k uses counters DRAWS*k + j (t: j = 0, 1;
 * placement: 2, 3; noise seed: 4); epoch e's photo order is a Fisher-Yates shuffle with counters SHUFFLE_BASE + e*P + m.
 * Photo, crop box and noise seed must equal the host's exactly; t agrees to the last bits of libm.
 */
object Schedule {
    fun photoOrder(seed: Long, epoch: Long, numPhotos: Int): IntArray {
        val order = IntArray(numPhotos) { it }
        var m = 0L
        for (i in numPhotos - 1 downTo 1) {
            val u = PortableRng.uniform(seed, BundleContract.SCHEDULE_SHUFFLE_BASE + epoch * numPhotos + m)
            val r = min(floor(u * (i + 1)).toInt(), i)
            val tmp = order[i]; order[i] = order[r]; order[r] = tmp
            m += 1
        }
        return order
    }

    fun drawT(u0: Double, u1: Double, how: String): Double {
        val t = if (how == "logit_normal") {
            val z = sqrt(-2.0 * ln(u0)) * cos(2.0 * PI * u1)
            1.0 / (1.0 + exp(-z))
        } else u0
        return min(max(t, BundleContract.SCHEDULE_T_MIN), BundleContract.SCHEDULE_T_MAX)
    }

    /** Crop side for t: s_min + t (s_max - s_min), rounded half to even to the multiple, clamped to [s_min, s_max] and
     *  to the short side (rounded down to the multiple). Returns (side, clamped). */
    fun cropSide(t: Double, sMin: Int, sMax: Int, multiple: Int, shortSide: Int): Pair<Int, Boolean> {
        val limit = (shortSide / multiple) * multiple
        require(limit >= multiple) { "a photo with short side $shortSide px cannot hold a $multiple px crop" }
        val raw = sMin + t * (sMax - sMin)
        var side = round(raw / multiple).toInt() * multiple          // kotlin.math.round: half to even
        side = max(sMin, min(side, sMax))
        return if (side > limit) Pair(limit, true) else Pair(side, false)
    }

    fun placeCrop(side: Int, h: Int, w: Int, ux: Double, uy: Double): Pair<Int, Int> {
        val x0 = min(floor(ux * (w - side + 1)).toInt(), w - side)
        val y0 = min(floor(uy * (h - side + 1)).toInt(), h - side)
        return Pair(x0, y0)
    }

    /** The schedule for photos of sizes [h, w] (normalised to the data resolution), in the host's order. */
    fun make(cfg: ScheduleConfig, sizesHw: List<IntArray>): List<PlannedSample> {
        require(sizesHw.isNotEmpty()) { "a schedule needs at least one photo" }
        val n = cfg.steps * cfg.gradAccum
        val p = sizesHw.size
        val draws = BundleContract.SCHEDULE_SAMPLE_DRAWS.toLong()
        var order = IntArray(0)
        val out = ArrayList<PlannedSample>(n)
        for (k in 0 until n) {
            if (k % p == 0) order = photoOrder(cfg.seed, (k / p).toLong(), p)
            val photo = order[k % p]
            val h = sizesHw[photo][0]; val w = sizesHw[photo][1]
            val c = draws * k
            val t = drawT(PortableRng.uniform(cfg.seed, c), PortableRng.uniform(cfg.seed, c + 1), cfg.tSampling)
            val noiseSeed = PortableRng.word(cfg.seed, c + 4) ushr 1
            if (cfg.dynamicPatches) {
                val side = cropSide(t, cfg.sMinPx, cfg.sMaxPx, cfg.multiplePx, min(h, w)).first
                val xy = placeCrop(side, h, w, PortableRng.uniform(cfg.seed, c + 2), PortableRng.uniform(cfg.seed, c + 3))
                out.add(PlannedSample(k, photo, t, xy.first, xy.second, side, noiseSeed))
            } else {
                val side = min(h, w)
                out.add(PlannedSample(k, photo, t, (w - side) / 2, (h - side) / 2, side, noiseSeed))
            }
        }
        return out
    }
}
