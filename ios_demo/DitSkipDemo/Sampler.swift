import Foundation

/// The generation sampler, the Swift twin of ditskip_edge/runtime/sampler.py: FlowMatchEulerDiscreteScheduler's
/// sigmas as FluxPipeline drives it (linspace(1, 1/N, N) in float32, shifted, then 0) and the guided Euler step
/// x += (sigma_next - sigma) * (v_u + g (v_c - v_u)), in float32.
enum Sampler {
    static func sigmas(steps: Int, shift: Float, dynamic: Bool, mu: Double?, timeShiftType: String) -> [Float] {
        var out = [Float](repeating: 0, count: steps + 1)
        for i in 0..<steps {
            let s = Float(i == steps - 1 ? 1.0 / Double(steps) : 1.0 + Double(i) * ((1.0 / Double(steps) - 1.0) / Double(steps - 1)))
            if dynamic && timeShiftType == "exponential" {
                let e = Float(exp(mu!)); out[i] = e / (e + pow(1 / s - 1, 1))
            } else if dynamic {
                let m = Float(mu!); out[i] = m / (m + pow(1 / s - 1, 1))
            } else {
                out[i] = shift * s / (1 + (shift - 1) * s)
            }
        }
        return out
    }

    /// x += (sigmaNext - sigma) * (vu + g (vc - vu)) in place; vUncond nil (guidance 1: the cond branch alone):
    /// x += (sigmaNext - sigma) * vc.
    static func guidedEulerStep(_ x: inout [Float], uncond vUncond: [Float]?, cond vCond: [Float], guidance: Float,
                                sigma: Float, sigmaNext: Float) {
        let dt = sigmaNext - sigma
        for i in 0..<x.count {
            let vc = vCond[i]
            if let vu = vUncond { x[i] = x[i] + dt * (vu[i] + guidance * (vc - vu[i])) } else { x[i] = x[i] + dt * vc }
        }
    }
}
