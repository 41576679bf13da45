// ExecuTorch's Module as the core uses it (internal: the only header besides its .cpp files that includes ExecuTorch):
// a program file and its optional .ptd data file, both memory-mapped by MmapDataLoader without mlock (clean
// file-backed pages a phone may drop; never copied into anonymous memory), and a method call on HostTensors.
#pragma once

#include <executorch/extension/module/module.h>

#include <memory>
#include <string>
#include <vector>

#include "train/host_tensor.h"

namespace ditskip {

using executorch::extension::Module;
using executorch::runtime::EValue;

// Loads the program (not yet its methods); a refused file is runtime_failure naming it.
std::unique_ptr<Module> open_module(const std::string& pte_path, const std::string& ptd_path = "");

// Loads `method` if it is not; runtime_failure naming the program and the method.
void load_method(Module& module, const std::string& method, const std::string& where);

// Runs `method` on `inputs` (non-owning views of their bytes: the method copies memory-planned inputs in).
// The outputs alias the method's memory until the next call.
std::vector<EValue> run_method(Module& module, const std::string& method, const std::vector<const HostTensor*>& inputs,
                               const std::string& where);

// "ExecuTorch error 0x12 (InvalidArgument)"
std::string et_error_text(executorch::runtime::Error error);

}  // namespace ditskip
