#include "train/adamw.h"

#include <cmath>

namespace ditskip {

AdamW::AdamW(const OptimizerSpec& spec, const std::vector<int64_t>& numels)
    : lr_(spec.lr), beta1_(spec.beta1), beta2_(spec.beta2), eps_(spec.eps), weight_decay_(spec.weight_decay) {
  for (int64_t n : numels) {
    m.emplace_back(size_t(n), 0.0f);
    v.emplace_back(size_t(n), 0.0f);
  }
}

void AdamW::step(const std::vector<float*>& params, const std::vector<std::vector<float>>& grads) {
  step_count += 1;
  const double k = double(step_count);
  const double bias1 = 1.0 - std::pow(beta1_, k);                  // Python: 1.0 - beta1 ** k (doubles)
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(beta2_, k));
  const float step_size = float(lr_ / bias1);                       // np.float32(lr / bias1)
  const float decay = float(1.0 - lr_ * weight_decay_);             // np.float32(1.0 - lr * weight_decay)
  const float b1 = float(beta1_), one_minus_b1 = float(1.0 - beta1_);
  const float b2 = float(beta2_), one_minus_b2 = float(1.0 - beta2_);
  const float b2_sqrt = float(bias2_sqrt), eps = float(eps_);
  for (size_t i = 0; i < params.size(); ++i) {
    float* p = params[i];
    const float* g = grads[i].data();
    float* mi = m[i].data();
    float* vi = v[i].data();
    const size_t n = m[i].size();
    for (size_t e = 0; e < n; ++e) {
      p[e] *= decay;
      mi[e] *= b1;
      mi[e] += one_minus_b1 * g[e];
      vi[e] *= b2;
      vi[e] += (one_minus_b2 * g[e]) * g[e];
      const float denom = std::sqrt(vi[e]) / b2_sqrt + eps;
      p[e] -= step_size * (mi[e] / denom);
    }
  }
}

}  // namespace ditskip
