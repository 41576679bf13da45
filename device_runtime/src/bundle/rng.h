// The portable generator (ditskip_edge/runtime/rng.py): splitmix64 over counters, uniforms in (0, 1), Box-Muller
// normals (cos branch). Element i of a tensor is normal[i], independent of its shape.
#pragma once

#include <cstdint>
#include <vector>

namespace ditskip::rng {

uint64_t word(uint64_t seed, uint64_t counter);       // splitmix64(seed + (counter + 1) * 0x9E3779B97F4A7C15)
double uniform(uint64_t seed, uint64_t counter);      // ((word >> 11) + 0.5) * 2^-53
void normal(uint64_t seed, float* out, int64_t count);   // rng.normal(seed, shape) flattened, float32

}  // namespace ditskip::rng
