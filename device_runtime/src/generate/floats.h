// A float32 array the data layer of generation computes (conditioning, latents, decoded tiles): shape + row-major
// values. The driver hands it to a program as a view (run/program_runner.h TensorView), no copy.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ditskip::generate {

struct Floats {
  std::vector<int64_t> shape;
  std::vector<float> data;
  Floats() = default;
  explicit Floats(std::vector<int64_t> s) : shape(std::move(s)), data(size_t(numel_of(shape)), 0.0f) {}
  Floats(std::vector<int64_t> s, std::vector<float> d) : shape(std::move(s)), data(std::move(d)) {}
  static int64_t numel_of(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

using NamedFloats = std::map<std::string, Floats>;

}  // namespace ditskip::generate
