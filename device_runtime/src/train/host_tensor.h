// A tensor the core hands to a program: dtype name (contract.py: float32 | int8 | uint8), shape, owned bytes.
// NamedInputs is inputs.py's dict: "x0", "noise", "t", "cond.<key>", "entry.<part>".
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "bundle/bundle.h"
#include "util/shape.h"

namespace ditskip {

struct HostTensor {
  std::string dtype = "float32";
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;
  static HostTensor floats(std::vector<int64_t> shape, const float* data);   // float32 copy of numel(shape) values
};

using NamedInputs = std::map<std::string, HostTensor>;

size_t dtype_bytes(const std::string& dtype);          // 4 / 1 / 1; refuses another

// contract.py ordered_inputs: the program's inputs in call order, each checked against its spec's shape (a missing
// input or another shape refused with ordered_inputs' message) and given the spec's dtype (numpy's astype: the few
// converted ones are kept in `converted`; the others point into `named`, uncopied).
std::vector<const HostTensor*> ordered_inputs(const ProgramEntry& program, const NamedInputs& named,
                                              std::list<HostTensor>& converted);

}  // namespace ditskip
