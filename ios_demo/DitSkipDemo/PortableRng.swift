import Foundation

/// The portable noise RNG, the Swift twin of ditskip_edge/rng.py (splitmix64 + Box-Muller, cos branch only).
/// UInt64 arithmetic uses the wrapping operators (&+, &*) exactly as numpy's uint64 wraps.
enum PortableRng {
    static let golden: UInt64 = 0x9E3779B97F4A7C15
    static let mix1: UInt64 = 0xBF58476D1CE4E5B9
    static let mix2: UInt64 = 0x94D049BB133111EB
    static let twoPowM53: Double = 1.0 / 9007199254740992.0   // 2^-53

    static func splitmix64(_ x: UInt64) -> UInt64 {
        var z = x
        z = (z ^ (z >> 30)) &* mix1
        z = (z ^ (z >> 27)) &* mix2
        return z ^ (z >> 31)
    }

    /// word(i): the raw 64-bit word for counter i (rng.words).
    static func word(seed: UInt64, _ i: UInt64) -> UInt64 {
        splitmix64(seed &+ (i &+ 1) &* golden)
    }

    /// uniform(i) in (0, 1) for counter i.
    static func uniform(seed: UInt64, _ i: UInt64) -> Double {
        let word = word(seed: seed, i)
        return (Double(word >> 11) + 0.5) * twoPowM53
    }

    /// count standard normals; element i from counters 2i and 2i+1 (row-major order of the tensor).
    static func normal(seed: UInt64, count: Int) -> [Float] {
        (0..<count).map { i in
            let u1 = uniform(seed: seed, UInt64(2 * i))
            let u2 = uniform(seed: seed, UInt64(2 * i + 1))
            return Float((-2.0 * log(u1)).squareRoot() * cos(2.0 * Double.pi * u2))
        }
    }

    /// True when this build reproduces the host's first normals for the contract's check seed.
    static func selfCheck() -> Bool {
        let expect = BundleContract.rngCheckNormals
        let got = normal(seed: UInt64(BundleContract.rngCheckSeed), count: expect.count)
        return zip(got, expect).allSatisfy { abs($0 - Float($1)) <= 1e-6 }
    }
}
