// AdamW exactly as ditskip_edge/runtime/adamw.py computes it: float32 element arithmetic in numpy's order, the
// step's scalars in double and rounded to float32 where numpy rounds them. Same update as torch.optim.AdamW:
//
//     p <- p * (1 - lr * weight_decay)
//     m <- beta1 * m + (1 - beta1) * g
//     v <- beta2 * v + (1 - beta2) * g * g
//     p <- p - (lr / (1 - beta1^k)) * m / (sqrt(v) / sqrt(1 - beta2^k) + eps)        k = step count, from 1
//
// Parameters are the runtime's own memory (updated in place); m and v are owned here, one array per parameter in
// the program's parameter order.
#pragma once

#include <cstdint>
#include <vector>

#include "bundle/bundle.h"

namespace ditskip {

class AdamW {
 public:
  AdamW(const OptimizerSpec& spec, const std::vector<int64_t>& numels);
  void set_lr(double lr) { lr_ = lr; }
  // params[i] / grads[i]: numels[i] floats each
  void step(const std::vector<float*>& params, const std::vector<std::vector<float>>& grads);

  int64_t step_count = 0;
  std::vector<std::vector<float>> m, v;

 private:
  double lr_, beta1_, beta2_, eps_, weight_decay_;
};

}  // namespace ditskip
