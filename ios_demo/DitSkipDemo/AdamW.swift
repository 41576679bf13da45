import Foundation

/// AdamW exactly as torch.optim.AdamW computes it (the Python runtime trainer's update; ExecuTorch ships only SGD):
///
///   p = p * (1 - lr * weight_decay)
///   m = beta1 * m + (1 - beta1) * g
///   v = beta2 * v + (1 - beta2) * g * g
///   bc1 = 1 - beta1^step ; bc2 = 1 - beta2^step
///   p = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
///
/// Parameters are views of the runtime's arena (DSTensorView.data): the update writes them in place.
final class AdamW {
    var lr: Double                    // the rate of the next update: the trainer sets lrAt(...) before each
    let beta1: Double, beta2: Double, eps: Double, weightDecay: Double
    var m: [String: [Float]] = [:]
    var v: [String: [Float]] = [:]
    private(set) var stepCount: Int = 0

    init(lr: Double, beta1: Double, beta2: Double, eps: Double, weightDecay: Double) {
        self.lr = lr; self.beta1 = beta1; self.beta2 = beta2; self.eps = eps; self.weightDecay = weightDecay
    }

    /// The rate of optimizer step `step` (0-based) of `steps` under the manifest's optimizer.lr_schedule
    /// (docs/bundle_contract.json adamw.lr_schedules; ditskip_edge/runtime/bundle.py OptimizerSpec.lr_at).
    static func lrAt(lr: Double, schedule: String, step: Int, steps: Int) throws -> Double {
        if schedule == "constant" { return lr }
        if schedule == "linear" { return lr * (1.0 - Double(step) / Double(steps)) }
        throw TrainError.runtime("optimizer.\(BundleContract.lrScheduleField) '\(schedule)': this app knows "
                                 + BundleContract.lrSchedules.joined(separator: ", "))
    }

    func restore(step: Int, m: [String: [Float]], v: [String: [Float]]) {
        self.stepCount = step; self.m = m; self.v = v
    }

    func step(params: [String: UnsafeMutablePointer<Float>], counts: [String: Int], grads: [String: [Float]]) {
        stepCount += 1
        let bc1 = 1.0 - pow(beta1, Double(stepCount))
        let bc2 = 1.0 - pow(beta2, Double(stepCount))
        let stepSize = Float(lr / bc1)
        let bc2Sqrt = Float(bc2.squareRoot())
        let decay = Float(1.0 - lr * weightDecay)
        let b1 = Float(beta1), b2 = Float(beta2), e = Float(eps)
        for (name, p) in params {
            let n = counts[name]!
            guard let g = grads[name] else { fatalError("no gradient for parameter \(name)") }
            var mm = m[name] ?? [Float](repeating: 0, count: n)
            var vv = v[name] ?? [Float](repeating: 0, count: n)
            for i in 0..<n {
                let pi = p[i] * decay
                mm[i] = b1 * mm[i] + (1 - b1) * g[i]
                vv[i] = b2 * vv[i] + (1 - b2) * g[i] * g[i]
                let denom = vv[i].squareRoot() / bc2Sqrt + e
                p[i] = pi - stepSize * mm[i] / denom
            }
            m[name] = mm; v[name] = vv
        }
    }
}
