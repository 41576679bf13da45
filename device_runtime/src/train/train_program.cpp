#include "train/train_program.h"

#include <algorithm>
#include <set>

#include "train/executorch_module.h"
#include "util/failure.h"

namespace ditskip {

namespace {

const char kGradientsIndex[] = "__et_training_gradients_index_";
const char kParametersIndex[] = "__et_training_parameters_index_";
const char kFqn[] = "__et_training_fqn_";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Python's repr of sorted(names)[:3]: "['a', 'b', 'c']"
std::string first_three(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string s = "[";
  for (size_t i = 0; i < names.size() && i < 3; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  return s + "]";
}

}  // namespace

struct TrainProgram::Impl {
  std::unique_ptr<Module> module;
};

std::string program_sha256(const Bundle& bundle, const ProgramEntry& entry) {
  std::string out = bundle.file_sha256(entry.path);
  for (const std::string& d : entry.data) out += "+" + bundle.file_sha256(d);
  return out;
}

TrainProgram::TrainProgram(const Bundle& bundle, const ProgramEntry& entry) : impl_(new Impl), entry_(entry) {
  if (entry.data.size() > 1)
    refuse(bundle.root() + ": executorch program " + entry.path + " lists " + std::to_string(entry.data.size()) +
           " data files; expected at most one .ptd");
  if (!entry.data.empty() && !ends_with(entry.data[0], ".ptd"))
    refuse(bundle.root() + ": executorch program " + entry.path + ": data file " + entry.data[0] + " is not a .ptd");
  impl_->module = open_module(bundle.path(entry.path), entry.data.empty() ? "" : bundle.path(entry.data[0]));
  load_method(*impl_->module, entry.method, entry.path);
}

TrainProgram::~TrainProgram() = default;

float TrainProgram::forward_backward(const NamedInputs& named) {
  Module& module = *impl_->module;
  std::list<HostTensor> converted;
  const std::vector<const HostTensor*> inputs = ordered_inputs(entry_, named, converted);
  if (!prepared()) {
    auto index_of = [&](const std::string& method) -> size_t {
      auto out = run_method(module, method, {}, entry_.path);
      if (out.empty() || !out[0].isInt()) runtime_failure(entry_.path + ": " + method + " gave no integer");
      return size_t(out[0].toInt());
    };
    grad_start_ = index_of(kGradientsIndex + entry_.method);
    param_start_ = index_of(kParametersIndex + entry_.method);
  }
  std::vector<EValue> outputs = run_method(module, entry_.method, inputs, entry_.path);
  if (outputs.empty() || !outputs[0].isTensor() ||
      outputs[0].toTensor().scalar_type() != executorch::aten::ScalarType::Float || outputs[0].toTensor().numel() < 1)
    runtime_failure(entry_.path + ": output 0 (the loss) is not a float32 tensor");
  const float loss = outputs[0].toTensor().const_data_ptr<float>()[0];
  if (!prepared()) {
    // the names: copied to owned strings (the program's views die with the method's outputs)
    std::vector<std::string> fqn;
    for (const EValue& v : run_method(module, kFqn + entry_.method, {}, entry_.path)) {
      if (!v.isString()) runtime_failure(entry_.path + ": " + kFqn + entry_.method + " gave a value that is not a name");
      fqn.emplace_back(v.toString());
    }
    if (grad_start_ > param_start_ || param_start_ > outputs.size() || param_start_ - grad_start_ != fqn.size() ||
        outputs.size() - param_start_ != fqn.size())
      runtime_failure(entry_.path + ": outputs are not [user outputs, " + std::to_string(fqn.size()) +
                      " gradients, " + std::to_string(fqn.size()) + " parameters] (gradients at " +
                      std::to_string(grad_start_) + ", parameters at " + std::to_string(param_start_) + " of " +
                      std::to_string(outputs.size()) + ")");
    std::vector<std::string> manifest_names;
    for (const auto& kv : entry_.trainable) manifest_names.push_back(kv.first);
    if (std::set<std::string>(fqn.begin(), fqn.end()) != std::set<std::string>(manifest_names.begin(), manifest_names.end()))
      refuse(entry_.path + ": trainable parameters " + first_three(fqn) + ".. do not match the manifest's " +
             first_three(manifest_names) + "..");
    for (size_t i = 0; i < fqn.size(); ++i) {
      const EValue& p = outputs[param_start_ + i];
      if (!p.isTensor() || p.toTensor().scalar_type() != executorch::aten::ScalarType::Float)
        runtime_failure(entry_.path + ": parameter " + fqn[i] + " is not a float32 tensor");
      auto t = p.toTensor();
      params_.push_back(t.mutable_data_ptr<float>());
      numels_.push_back(int64_t(t.numel()));
      shapes_.emplace_back(t.sizes().begin(), t.sizes().end());
    }
    names_ = std::move(fqn);
  }
  grads_.clear();
  for (size_t i = 0; i < names_.size(); ++i) {
    const EValue& g = outputs[grad_start_ + i];
    if (!g.isTensor() || g.toTensor().scalar_type() != executorch::aten::ScalarType::Float ||
        int64_t(g.toTensor().numel()) != numels_[i])
      runtime_failure(entry_.path + ": gradient of " + names_[i] + " is not a float32 tensor of its parameter's size");
    grads_.push_back(g.toTensor().const_data_ptr<float>());
  }
  return loss;
}

}  // namespace ditskip
