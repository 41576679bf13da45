// One ExecuTorch program run as it is, without a bundle (ditskip_program_* in the C header; `ditskip-run step`):
// the .pte and the optional .ptd memory-mapped without mlock (executorch_module.h), a method called on views of the
// caller's inputs (no copy besides the one the method makes into its planned memory), output 0's first element back.
#pragma once

#include <memory>
#include <string>

#include "ditskip/ditskip.h"

namespace ditskip {

class RawProgram {
 public:
  RawProgram(const std::string& pte_path, const std::string& ptd_path);   // ptd_path empty: no data file
  ~RawProgram();
  RawProgram(const RawProgram&) = delete;
  RawProgram& operator=(const RawProgram&) = delete;

  void load_method(const std::string& method);
  // Inputs checked (known dtype, ndim >= 0, sizes >= 0, data for a non-empty tensor); output 0 must be a tensor with
  // at least one element of a number dtype.
  double run(const std::string& method, const ditskip_tensor* inputs, int n_inputs);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pte_path_;
};

}  // namespace ditskip
