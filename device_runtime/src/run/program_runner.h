// One forward program of a bundle (the subject stage's encode / embed / block programs, generation's text encoder,
// embed / block / head and decode programs): loaded with its data file (both memory-mapped, not locked), called with
// named inputs, its outputs returned by name. runtime/forward.py ProgramRunner and generation.py Programs.
//
// Inputs are views of caller memory (a weight mapped from the bundle's file is handed over in place: the generation
// programs take their weights as unplanned inputs, so ExecuTorch points at the caller's bytes instead of copying);
// they are taken in the manifest's input order and checked against its specs (contract.py ordered_inputs' message
// for a missing input or another shape); an input of another dtype than its spec is converted (numpy's astype).
// Outputs are copied out as float32 (forward.py: np.array(o, float32, copy=True)) or as the spec's dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bundle/bundle.h"
#include "train/host_tensor.h"

namespace ditskip {

struct TensorView {                       // caller-owned bytes, read during run() only
  std::string dtype = "float32";          // float32 | int8 | uint8 | int64
  std::vector<int64_t> shape;
  const void* data = nullptr;
  static TensorView of(const HostTensor& t) { return {t.dtype, t.shape, t.bytes.data()}; }
};

// name -> view, or false when the caller has no such input (then run() refuses with ordered_inputs' message)
using InputLookup = std::function<bool(const std::string& name, TensorView& out)>;

class ProgramRunner {
 public:
  // Loads the program, its data file and its method now: a damaged program, or a data file that does not match its
  // program, is refused here naming the file (forward.py executorch_call: "<data>: does not match its program
  // <name> (ExecuTorch could not load it: ...)" / "<program>: ExecuTorch could not load the program (...)").
  ProgramRunner(const Bundle& bundle, const ProgramEntry& entry);
  ~ProgramRunner();
  ProgramRunner(const ProgramRunner&) = delete;
  ProgramRunner& operator=(const ProgramRunner&) = delete;

  const ProgramEntry& entry() const { return entry_; }
  // Runs the method; outputs by the manifest's output names.
  NamedInputs run(const InputLookup& lookup);
  NamedInputs run(const NamedInputs& inputs);
  // forward.py ProgramRunner.check: once on zeros of every input's spec (resolves every weight of the data file).
  void check();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ProgramEntry entry_;
  std::string path_, data_path_;
};

}  // namespace ditskip
