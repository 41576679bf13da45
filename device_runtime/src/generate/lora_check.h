// A LoRA file refused unless it is this bundle's (ditskip_edge/runtime/generation.py check_lora, the same messages):
// the keys and metadata the manifest's lora_file records (the plan's kept blocks, rank, alpha, targets), float
// matrices, shapes that fit the frozen weights. Returns its tensors as float32 (F16 widened).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bundle/bundle.h"
#include "generate/weights.h"

namespace ditskip::generate {

extern const char* const kLoraStates[4];      // "weight", "w_codes", "w_scale", "w_packed"

struct LoraMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> values;                  // [rows, cols]
};

// path: the LoRA file (its folder already resolved to <folder>/<lora_file.name>), as the user named it.
std::map<std::string, LoraMatrix> check_lora(const Bundle& bundle, const std::string& path, const MappedWeights& base);

}  // namespace ditskip::generate
