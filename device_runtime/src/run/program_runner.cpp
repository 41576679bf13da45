#include "run/program_runner.h"

#include <executorch/extension/tensor/tensor.h>

#include <cstring>
#include <list>

#include "train/executorch_module.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/shape.h"

namespace ditskip {

using executorch::aten::ScalarType;
using executorch::runtime::Error;

namespace {

ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "float32") return ScalarType::Float;
  if (dtype == "int8") return ScalarType::Char;
  if (dtype == "uint8") return ScalarType::Byte;
  if (dtype == "int64") return ScalarType::Long;
  refuse("dtype " + dtype + ": expected float32, int8, uint8 or int64");
}

size_t element_bytes(const std::string& dtype) { return dtype == "int64" ? 8 : dtype == "float32" ? 4 : 1; }

template <typename From>
double load_as_double(const void* p, int64_t i) {
  From x;
  std::memcpy(&x, static_cast<const uint8_t*>(p) + i * int64_t(sizeof(From)), sizeof(From));
  return double(x);
}

double element(const TensorView& v, int64_t i) {
  if (v.dtype == "float32") return load_as_double<float>(v.data, i);
  if (v.dtype == "int8") return load_as_double<int8_t>(v.data, i);
  if (v.dtype == "uint8") return load_as_double<uint8_t>(v.data, i);
  if (v.dtype == "int64") return load_as_double<int64_t>(v.data, i);
  refuse("dtype " + v.dtype + ": expected float32, int8, uint8 or int64");
}

// numpy's astype for the few inputs given in another dtype than their spec (e.g. a float timestep for an int input)
std::vector<uint8_t> converted(const TensorView& v, const std::string& dtype) {
  const int64_t n = numel(v.shape);
  std::vector<uint8_t> out(size_t(n) * element_bytes(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const double x = element(v, i);
    uint8_t* at = out.data() + i * int64_t(element_bytes(dtype));
    if (dtype == "float32") { const float y = float(x); std::memcpy(at, &y, 4); }
    else if (dtype == "int64") { const int64_t y = int64_t(x); std::memcpy(at, &y, 8); }
    else if (dtype == "int8") { const int8_t y = int8_t(x); std::memcpy(at, &y, 1); }
    else { const uint8_t y = uint8_t(x); std::memcpy(at, &y, 1); }
  }
  return out;
}

}  // namespace

struct ProgramRunner::Impl {
  std::unique_ptr<Module> module;
};

ProgramRunner::ProgramRunner(const Bundle& bundle, const ProgramEntry& entry)
    : impl_(std::make_unique<Impl>()), entry_(entry), path_(bundle.path(entry.path)),
      data_path_(entry.data.empty() ? "" : bundle.path(entry.data[0])) {
  try {
    impl_->module = open_module(path_, data_path_);
    load_method(*impl_->module, entry_.method, path_);
  } catch (const Failure& e) {
    if (e.status() != DITSKIP_RUNTIME_ERROR) throw;
    if (!data_path_.empty())
      refuse(data_path_ + ": does not match its program " + path_.substr(path_.rfind('/') + 1) +
             " (ExecuTorch could not load it: " + e.what() + ")");
    refuse(path_ + ": ExecuTorch could not load the program (" + e.what() + ")");
  }
}

ProgramRunner::~ProgramRunner() = default;

NamedInputs ProgramRunner::run(const NamedInputs& inputs) {
  return run([&](const std::string& name, TensorView& out) {
    const auto it = inputs.find(name);
    if (it == inputs.end()) return false;
    out = TensorView::of(it->second);
    return true;
  });
}

NamedInputs ProgramRunner::run(const InputLookup& lookup) {
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<EValue> args;
  std::list<std::vector<uint8_t>> copies;
  tensors.reserve(entry_.inputs.size());
  args.reserve(entry_.inputs.size());
  for (const TensorSpec& spec : entry_.inputs) {
    TensorView v;
    if (!lookup(spec.name, v)) refuse("program " + entry_.path + ": input '" + spec.name + "' has no source in the bundle");
    if (v.shape != spec.shape)
      refuse("program " + entry_.path + ": input " + spec.name + " has shape " + shape_repr(v.shape) +
             ", the program expects " + shape_repr(spec.shape));
    void* data = const_cast<void*>(v.data);
    if (v.dtype != spec.dtype) {
      copies.push_back(converted(v, spec.dtype));
      data = copies.back().data();
    }
    std::vector<executorch::aten::SizesType> sizes(spec.shape.begin(), spec.shape.end());
    tensors.push_back(executorch::extension::make_tensor_ptr(std::move(sizes), data, scalar_type(spec.dtype)));
    args.emplace_back(*tensors.back());
  }
  auto result = impl_->module->execute(entry_.method, args);
  if (!result.ok())
    refuse(path_ + ": ExecuTorch could not run the program (method " + entry_.method + " failed: " +
           et_error_text(result.error()) + ")");
  const std::vector<EValue>& outs = result.get();
  if (outs.size() != entry_.outputs.size())
    refuse(path_ + ": " + std::to_string(outs.size()) + " outputs, the manifest lists " +
           std::to_string(entry_.outputs.size()));
  NamedInputs named;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].isTensor()) refuse(path_ + ": output " + entry_.outputs[k].name + " is not a tensor");
    const auto& t = outs[k].toTensor();
    HostTensor h;
    h.shape.assign(t.sizes().begin(), t.sizes().end());
    const int64_t n = numel(h.shape);
    if (t.scalar_type() == ScalarType::Float) {
      h.dtype = "float32";
      h.bytes.resize(size_t(n) * 4);
      if (n) std::memcpy(h.bytes.data(), t.const_data_ptr(), h.bytes.size());
    } else if (t.scalar_type() == ScalarType::Char || t.scalar_type() == ScalarType::Byte) {
      h.dtype = t.scalar_type() == ScalarType::Char ? "int8" : "uint8";
      h.bytes.resize(size_t(n));
      if (n) std::memcpy(h.bytes.data(), t.const_data_ptr(), h.bytes.size());
    } else {
      refuse(path_ + ": output " + entry_.outputs[k].name + " has a dtype the runtime does not read");
    }
    named[entry_.outputs[k].name] = std::move(h);
  }
  return named;
}

void ProgramRunner::check() {
  NamedInputs zeros;
  for (const TensorSpec& spec : entry_.inputs) {
    HostTensor z;
    z.dtype = spec.dtype == "int64" ? "float32" : spec.dtype;   // HostTensor carries float32 / int8 / uint8
    z.shape = spec.shape;
    z.bytes.assign(size_t(numel(spec.shape)) * element_bytes(z.dtype), 0);
    zeros[spec.name] = std::move(z);
  }
  run(zeros);
}

}  // namespace ditskip
