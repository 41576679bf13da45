// A bundle's train_step program (a joint forward-backward .pte, ExecuTorch) as ExecuTorch's Python TrainingModule
// reads it (executorch/extension/training/pybindings/_training_module.py; runtime/executorch.py ExecutorchStep):
//
//     outputs = forward(inputs)        [user outputs (loss first), gradients, parameters]
//     __et_training_gradients_index_forward()  -> where the gradients start
//     __et_training_parameters_index_forward() -> where the parameters start
//     __et_training_fqn_forward()              -> their names
//
// The parameters alias the method's memory: the optimizer updates them in place and the next call sees that. The
// gradients are overwritten by every call (the loop sums them itself). The .pte and the .ptd (the entry's `data`)
// are memory-mapped, never locked or copied.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bundle/bundle.h"
#include "train/host_tensor.h"

namespace ditskip {

class TrainProgram {
 public:
  TrainProgram(const Bundle& bundle, const ProgramEntry& entry);   // refuses more than one data file, or not a .ptd
  ~TrainProgram();
  TrainProgram(const TrainProgram&) = delete;
  TrainProgram& operator=(const TrainProgram&) = delete;

  // Forward + backward of one sample, inputs by name (ordered and shape-checked by the entry's `inputs`); returns the
  // loss. The first call finds the parameters and checks their names against the entry's `trainable`.
  float forward_backward(const NamedInputs& inputs);

  bool prepared() const { return !names_.empty(); }
  const std::vector<std::string>& names() const { return names_; }            // the program's parameter order
  const std::vector<float*>& parameters() const { return params_; }            // live method memory
  const std::vector<const float*>& gradients() const { return grads_; }       // valid until the next call
  const std::vector<std::vector<int64_t>>& shapes() const { return shapes_; }
  const std::vector<int64_t>& numels() const { return numels_; }
  const ProgramEntry& entry() const { return entry_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ProgramEntry entry_;
  std::vector<std::string> names_;
  std::vector<float*> params_;
  std::vector<const float*> grads_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<int64_t> numels_;
  size_t grad_start_ = 0, param_start_ = 0;
};

// program_step.py program_sha256: the manifest's SHA-256 of the program's files (path, then data) joined by "+".
std::string program_sha256(const Bundle& bundle, const ProgramEntry& entry);

}  // namespace ditskip
