// The sampler of generation (ditskip_edge/runtime/sampler.py): FlowMatchEulerDiscreteScheduler's sigmas as FluxPipeline
// drives it, classifier-free guidance and the Euler step, in float32 exactly as numpy computes them (the linspace in
// float64 then float32; the shift in float32, Python floats taken as float32 as numpy does for an array operand).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/json.h"

namespace ditskip::generate {

// N + 1 float32 sigmas from 1 down to 0 (the last is 0). time_shift_type: "exponential" | "linear" (refused
// otherwise, as sampler.py); use_dynamic_shifting without mu refused.
std::vector<float> sigmas(int steps, double shift, bool use_dynamic_shifting, const json& mu,
                          const std::string& time_shift_type);
// The manifest's generation.sampler record (sampler.py sigmas_for).
std::vector<float> sigmas_for(const json& sampler, int steps);

// v_uncond + g (v_cond - v_uncond), in place on v_cond (float32, g as float32).
void guided(const float* v_uncond, float* v_cond, int64_t n, double guidance);
// x + (sigma_next - sigma) v, in place on x.
void euler_step(float* x, const float* v, int64_t n, float sigma, float sigma_next);

}  // namespace ditskip::generate
