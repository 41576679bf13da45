#include "train/raw_program.h"

#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include <vector>

#include "train/executorch_module.h"
#include "util/failure.h"

namespace ditskip {

using executorch::aten::ScalarType;

namespace {

ScalarType scalar_type(ditskip_dtype dtype, int k) {
  switch (dtype) {
    case DITSKIP_FLOAT32: return ScalarType::Float;
    case DITSKIP_INT8: return ScalarType::Char;
    case DITSKIP_UINT8: return ScalarType::Byte;
    case DITSKIP_INT32: return ScalarType::Int;
    case DITSKIP_INT64: return ScalarType::Long;
    case DITSKIP_FLOAT64: return ScalarType::Double;
    case DITSKIP_BOOL: return ScalarType::Bool;
  }
  refuse("input " + std::to_string(k) + ": dtype " + std::to_string(int(dtype)) +
         ": expected a ditskip_dtype (float32, int8, uint8, int32, int64, float64, bool)");
}

double first_element(const executorch::aten::Tensor& t) {
  switch (t.scalar_type()) {
    case ScalarType::Float: return t.const_data_ptr<float>()[0];
    case ScalarType::Double: return t.const_data_ptr<double>()[0];
    case ScalarType::Long: return double(t.const_data_ptr<int64_t>()[0]);
    case ScalarType::Int: return t.const_data_ptr<int32_t>()[0];
    case ScalarType::Char: return t.const_data_ptr<int8_t>()[0];
    case ScalarType::Byte: return t.const_data_ptr<uint8_t>()[0];
    case ScalarType::Bool: return t.const_data_ptr<bool>()[0] ? 1.0 : 0.0;
    default: runtime_failure("output 0 has dtype " + std::string(executorch::runtime::toString(t.scalar_type())) +
                             ": expected a number dtype");
  }
}

}  // namespace

struct RawProgram::Impl {
  std::unique_ptr<Module> module;
};

RawProgram::RawProgram(const std::string& pte_path, const std::string& ptd_path)
    : impl_(new Impl), pte_path_(pte_path) {
  impl_->module = open_module(pte_path, ptd_path);
}

RawProgram::~RawProgram() = default;

void RawProgram::load_method(const std::string& method) { ditskip::load_method(*impl_->module, method, pte_path_); }

double RawProgram::run(const std::string& method, const ditskip_tensor* inputs, int n_inputs) {
  if (n_inputs < 0) refuse("n_inputs " + std::to_string(n_inputs) + ": expected >= 0");
  if (n_inputs > 0 && inputs == nullptr) refuse("inputs is NULL with n_inputs " + std::to_string(n_inputs));
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<EValue> args;
  tensors.reserve(size_t(n_inputs));
  args.reserve(size_t(n_inputs));
  for (int k = 0; k < n_inputs; ++k) {
    const ditskip_tensor& t = inputs[k];
    const ScalarType type = scalar_type(t.dtype, k);
    if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr))
      refuse("input " + std::to_string(k) + ": ndim " + std::to_string(t.ndim) + " with no shape");
    std::vector<executorch::aten::SizesType> sizes;
    int64_t numel = 1;
    for (int32_t d = 0; d < t.ndim; ++d) {
      if (t.shape[d] < 0) refuse("input " + std::to_string(k) + ": size " + std::to_string(t.shape[d]) + " < 0");
      sizes.push_back(executorch::aten::SizesType(t.shape[d]));
      numel *= t.shape[d];
    }
    if (numel > 0 && t.data == nullptr) refuse("input " + std::to_string(k) + ": data is NULL");
    tensors.push_back(executorch::extension::make_tensor_ptr(std::move(sizes), const_cast<void*>(t.data), type));
    args.emplace_back(*tensors.back());
  }
  if (!impl_->module->is_method_loaded(method)) load_method(method);
  auto out = impl_->module->execute(method, args);
  if (!out.ok()) runtime_failure(pte_path_ + ": method " + method + " failed (" + et_error_text(out.error()) + ")");
  const std::vector<EValue>& outputs = out.get();
  if (outputs.empty() || !outputs[0].isTensor() || outputs[0].toTensor().numel() < 1)
    runtime_failure(pte_path_ + ": method " + method + ": output 0 is not a tensor with an element");
  return first_element(outputs[0].toTensor());
}

}  // namespace ditskip
