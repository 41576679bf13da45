// A tensor shape's element count and its Python repr ("[1, 16, 16, 16]": refusal messages quote shapes as the Python
// runtime's f"{list(shape)}" does). One definition for the data layer, the trainer and the program runner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ditskip {

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline std::string shape_repr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace ditskip
