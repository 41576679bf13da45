// sampler.py, operation for operation (see sampler.h).
#include "generate/sampler.h"

#include <cmath>

#include "util/failure.h"

namespace ditskip::generate {

std::vector<float> sigmas(int steps, double shift, bool use_dynamic_shifting, const json& mu,
                          const std::string& time_shift_type) {
  if (steps < 1) refuse("steps " + std::to_string(steps) + ": expected >= 1");
  // np.linspace(1.0, 1.0 / steps, steps): start + i * step in float64, the last value the stop itself; astype float32
  std::vector<float> s(static_cast<size_t>(steps));
  const double start = 1.0, stop = 1.0 / steps;
  const double step = steps > 1 ? (stop - start) / double(steps - 1) : 0.0;
  for (int i = 0; i < steps; ++i) s[size_t(i)] = float(steps > 1 ? double(i) * step + start : start);
  if (steps > 1) s.back() = float(stop);
  if (use_dynamic_shifting) {
    if (mu.is_null()) refuse("generation.sampler: use_dynamic_shifting needs mu");
    const double m = mu.get<double>();
    if (time_shift_type == "exponential") {
      const float e = float(std::exp(m));                          // math.exp(mu), taken as float32 by numpy
      for (float& v : s) v = e / (e + (1.0f / v - 1.0f));          // (...) ** 1.0 is the value itself
    } else if (time_shift_type == "linear") {
      const float mf = float(m);
      for (float& v : s) v = mf / (mf + (1.0f / v - 1.0f));
    } else {
      refuse("generation.sampler: time_shift_type " + py_repr(json(time_shift_type)) +
             ", expected one of ('exponential', 'linear')");
    }
  } else {
    const float sh = float(shift), sh1 = float(shift - 1.0);
    for (float& v : s) v = sh * v / (1.0f + sh1 * v);
  }
  s.push_back(0.0f);
  return s;
}

std::vector<float> sigmas_for(const json& sampler, int steps) {
  const double shift = sampler.contains("shift") ? sampler["shift"].get<double>() : 1.0;
  const bool dynamic = sampler.contains("use_dynamic_shifting") && sampler["use_dynamic_shifting"].get<bool>();
  const json mu = sampler.contains("mu") ? sampler["mu"] : json();
  const std::string type = sampler.contains("time_shift_type") ? sampler["time_shift_type"].get<std::string>()
                                                               : "exponential";
  return sigmas(steps, shift, dynamic, mu, type);
}

void guided(const float* v_uncond, float* v_cond, int64_t n, double guidance) {
  const float g = float(guidance);
  for (int64_t i = 0; i < n; ++i) v_cond[i] = v_uncond[i] + g * (v_cond[i] - v_uncond[i]);
}

void euler_step(float* x, const float* v, int64_t n, float sigma, float sigma_next) {
  const float dt = sigma_next - sigma;
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + dt * v[i];
}

}  // namespace ditskip::generate
