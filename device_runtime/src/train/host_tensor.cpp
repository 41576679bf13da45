#include "train/host_tensor.h"

#include <cstring>

#include "util/failure.h"

namespace ditskip {

int64_t HostTensor::numel() const { return ditskip::numel(shape); }

HostTensor HostTensor::floats(std::vector<int64_t> shape, const float* data) {
  HostTensor t;
  t.shape = std::move(shape);
  t.bytes.resize(size_t(t.numel()) * sizeof(float));
  if (!t.bytes.empty()) std::memcpy(t.bytes.data(), data, t.bytes.size());
  return t;
}

size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "int8" || dtype == "uint8") return 1;
  refuse("dtype " + dtype + ": expected float32, int8 or uint8");
}

namespace {

template <typename From, typename To>
void cast_all(const uint8_t* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    From x;
    std::memcpy(&x, src + i * int64_t(sizeof(From)), sizeof(From));
    To y = static_cast<To>(x);
    std::memcpy(dst + i * int64_t(sizeof(To)), &y, sizeof(To));
  }
}

template <typename From>
void cast_from(const std::string& to, const uint8_t* src, uint8_t* dst, int64_t n) {
  if (to == "float32") cast_all<From, float>(src, dst, n);
  else if (to == "int8") cast_all<From, int8_t>(src, dst, n);
  else cast_all<From, uint8_t>(src, dst, n);
}

HostTensor as_dtype(const HostTensor& a, const std::string& dtype) {
  HostTensor out;
  out.dtype = dtype;
  out.shape = a.shape;
  out.bytes.resize(size_t(a.numel()) * dtype_bytes(dtype));
  if (a.dtype == "float32") cast_from<float>(dtype, a.bytes.data(), out.bytes.data(), a.numel());
  else if (a.dtype == "int8") cast_from<int8_t>(dtype, a.bytes.data(), out.bytes.data(), a.numel());
  else if (a.dtype == "uint8") cast_from<uint8_t>(dtype, a.bytes.data(), out.bytes.data(), a.numel());
  else refuse("dtype " + a.dtype + ": expected float32, int8 or uint8");
  return out;
}

}  // namespace

std::vector<const HostTensor*> ordered_inputs(const ProgramEntry& program, const NamedInputs& named,
                                              std::list<HostTensor>& converted) {
  std::vector<const HostTensor*> out;
  out.reserve(program.inputs.size());
  for (const TensorSpec& spec : program.inputs) {
    auto it = named.find(spec.name);
    if (it == named.end())
      refuse("program " + program.path + ": input '" + spec.name + "' has no source in the bundle");
    if (it->second.shape != spec.shape)
      refuse("program " + program.path + ": input " + spec.name + " has shape " + shape_repr(it->second.shape) +
             ", the program expects " + shape_repr(spec.shape));
    dtype_bytes(spec.dtype);
    if (it->second.dtype == spec.dtype) {
      out.push_back(&it->second);
    } else {
      converted.push_back(as_dtype(it->second, spec.dtype));
      out.push_back(&converted.back());
    }
  }
  return out;
}

}  // namespace ditskip
