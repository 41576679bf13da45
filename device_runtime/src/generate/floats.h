// A float32 array the data layer of generation computes (conditioning, latents, decoded tiles): shape + row-major
// values. The driver hands it to a program as a view (run/program_runner.h TensorView), no copy.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/shape.h"

namespace ditskip::generate {

struct Floats {
  std::vector<int64_t> shape;
  std::vector<float> data;
  Floats() = default;
  explicit Floats(std::vector<int64_t> s) : shape(std::move(s)), data(size_t(ditskip::numel(shape)), 0.0f) {}
  Floats(std::vector<int64_t> s, std::vector<float> d) : shape(std::move(s)), data(std::move(d)) {}
};

using NamedFloats = std::map<std::string, Floats>;

}  // namespace ditskip::generate
