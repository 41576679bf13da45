// The portable generator, line for line ditskip_edge/runtime/rng.py (numpy: uint64 wrapping arithmetic, float64
// Box-Muller, then float32).
#include "bundle/rng.h"

#include <cmath>

namespace ditskip::rng {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kM1 = 0xBF58476D1CE4E5B9ull;
constexpr uint64_t kM2 = 0x94D049BB133111EBull;
constexpr double kPi = 3.141592653589793;       // np.pi

uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * kM1;
  z = (z ^ (z >> 27)) * kM2;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t word(uint64_t seed, uint64_t counter) { return splitmix64(seed + (counter + 1) * kGolden); }

double uniform(uint64_t seed, uint64_t counter) {
  return (static_cast<double>(word(seed, counter) >> 11) + 0.5) * 0x1p-53;   // 2.0 ** -53
}

void normal(uint64_t seed, float* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double u0 = uniform(seed, 2 * static_cast<uint64_t>(i));
    const double u1 = uniform(seed, 2 * static_cast<uint64_t>(i) + 1);
    // np.sqrt(-2.0 * np.log(u[0::2])) * np.cos(2.0 * np.pi * u[1::2]): (2.0 * pi) first, as numpy evaluates it
    const double z = std::sqrt(-2.0 * std::log(u0)) * std::cos(2.0 * kPi * u1);
    out[i] = static_cast<float>(z);
  }
}

}  // namespace ditskip::rng
