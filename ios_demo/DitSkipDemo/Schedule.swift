import Foundation

/// The schedule's parameters (manifest `schedule`, schedule.json `config`).
struct ScheduleConfig {
    let steps: Int; let gradAccum: Int; let sMinPx: Int; let sMaxPx: Int; let multiplePx: Int
    let seed: UInt64; let tSampling: String; let dynamicPatches: Bool
}

/// One scheduled sample as the schedule computes it (t in float64, as schedule.json stores it).
struct PlannedSample { let index: Int; let photo: Int; let t: Double; let x0: Int; let y0: Int; let side: Int
                       let noiseSeed: UInt64 }

/// The training schedule computed on the phone from the photos' sizes: the Swift twin of
/// ditskip_edge/runtime/schedule.py and android_demo's Schedule.kt (schedule algorithm
/// BundleContract.scheduleAlgorithm). Every draw is PortableRng's uniform / word at a counter: sample k uses counters
/// DRAWS*k + j (t: j = 0, 1; placement: 2, 3; noise seed: 4); epoch e's photo order is a Fisher-Yates shuffle with
/// counters SHUFFLE_BASE + e*P + m. Photo, crop box and noise seed must equal the host's exactly.
enum Schedule {
    static func photoOrder(seed: UInt64, epoch: Int, numPhotos: Int) -> [Int] {
        var order = Array(0..<numPhotos)
        var m = 0
        var i = numPhotos - 1
        while i >= 1 {
            let c = UInt64(BundleContract.scheduleShuffleBase) &+ UInt64(epoch * numPhotos + m)
            let u = PortableRng.uniform(seed: seed, c)
            let r = min(Int((u * Double(i + 1)).rounded(.down)), i)
            order.swapAt(i, r)
            m += 1
            i -= 1
        }
        return order
    }

    static func drawT(_ u0: Double, _ u1: Double, _ how: String) -> Double {
        var t = u0
        if how == "logit_normal" {
            let z = (-2.0 * log(u0)).squareRoot() * cos(2.0 * Double.pi * u1)
            t = 1.0 / (1.0 + exp(-z))
        }
        return min(max(t, BundleContract.scheduleTMin), BundleContract.scheduleTMax)
    }

    /// Crop side for t, rounded half to even to the multiple, clamped to [s_min, s_max] and to the short side.
    static func cropSide(_ t: Double, sMin: Int, sMax: Int, multiple: Int, shortSide: Int) -> (Int, Bool) {
        let limit = (shortSide / multiple) * multiple
        let raw = Double(sMin) + t * Double(sMax - sMin)
        var side = Int((raw / Double(multiple)).rounded(.toNearestOrEven)) * multiple
        side = max(sMin, min(side, sMax))
        return side > limit ? (limit, true) : (side, false)
    }

    static func placeCrop(side: Int, h: Int, w: Int, ux: Double, uy: Double) -> (Int, Int) {
        (min(Int((ux * Double(w - side + 1)).rounded(.down)), w - side),
         min(Int((uy * Double(h - side + 1)).rounded(.down)), h - side))
    }

    /// The schedule for photos of sizes [h, w] (normalised to the data resolution), in the host's order.
    static func make(_ cfg: ScheduleConfig, sizesHw: [[Int]]) -> [PlannedSample] {
        let n = cfg.steps * cfg.gradAccum, p = sizesHw.count
        let draws = UInt64(BundleContract.scheduleSampleDraws)
        var order: [Int] = []
        var out: [PlannedSample] = []
        for k in 0..<n {
            if k % p == 0 { order = photoOrder(seed: cfg.seed, epoch: k / p, numPhotos: p) }
            let photo = order[k % p]
            let h = sizesHw[photo][0], w = sizesHw[photo][1]
            let c = draws &* UInt64(k)
            let t = drawT(PortableRng.uniform(seed: cfg.seed, c), PortableRng.uniform(seed: cfg.seed, c + 1), cfg.tSampling)
            let noiseSeed = PortableRng.word(seed: cfg.seed, c + 4) >> 1
            if cfg.dynamicPatches {
                let side = cropSide(t, sMin: cfg.sMinPx, sMax: cfg.sMaxPx, multiple: cfg.multiplePx, shortSide: min(h, w)).0
                let (x0, y0) = placeCrop(side: side, h: h, w: w, ux: PortableRng.uniform(seed: cfg.seed, c + 2),
                                         uy: PortableRng.uniform(seed: cfg.seed, c + 3))
                out.append(PlannedSample(index: k, photo: photo, t: t, x0: x0, y0: y0, side: side, noiseSeed: noiseSeed))
            } else {
                let side = min(h, w)
                out.append(PlannedSample(index: k, photo: photo, t: t, x0: (w - side) / 2, y0: (h - side) / 2, side: side,
                                         noiseSeed: noiseSeed))
            }
        }
        return out
    }
}
