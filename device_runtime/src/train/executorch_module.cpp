#include "train/executorch_module.h"

#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/tensor/tensor.h>

#include <cstdio>

#include "util/failure.h"

namespace ditskip {

using executorch::aten::ScalarType;
using executorch::extension::MmapDataLoader;
using executorch::runtime::Error;

std::string et_error_text(Error error) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "ExecuTorch error 0x%x (%s)", unsigned(error), executorch::runtime::to_string(error));
  return buf;
}

namespace {

std::unique_ptr<MmapDataLoader> map_file(const std::string& path) {
  auto loader = MmapDataLoader::from(path.c_str(), MmapDataLoader::MlockConfig::NoMlock);
  if (!loader.ok()) runtime_failure(path + ": cannot map the file (" + et_error_text(loader.error()) + ")");
  return std::make_unique<MmapDataLoader>(std::move(loader.get()));
}

ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "float32") return ScalarType::Float;
  if (dtype == "int8") return ScalarType::Char;
  if (dtype == "uint8") return ScalarType::Byte;
  refuse("dtype " + dtype + ": expected float32, int8 or uint8");
}

}  // namespace

std::unique_ptr<Module> open_module(const std::string& pte_path, const std::string& ptd_path) {
  std::unique_ptr<MmapDataLoader> data = ptd_path.empty() ? nullptr : map_file(ptd_path);
  auto module = std::make_unique<Module>(map_file(pte_path), nullptr, nullptr, nullptr, std::move(data));
  if (Error e = module->load(); e != Error::Ok)
    runtime_failure(pte_path + ": ExecuTorch refused the program (" + et_error_text(e) + ")");
  return module;
}

void load_method(Module& module, const std::string& method, const std::string& where) {
  if (Error e = module.load_method(method); e != Error::Ok)
    runtime_failure(where + ": loading method " + method + " failed (" + et_error_text(e) + ")");
}

std::vector<EValue> run_method(Module& module, const std::string& method, const std::vector<const HostTensor*>& inputs,
                               const std::string& where) {
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<EValue> args;
  tensors.reserve(inputs.size());
  args.reserve(inputs.size());
  for (const HostTensor* t : inputs) {
    std::vector<executorch::aten::SizesType> sizes(t->shape.begin(), t->shape.end());
    tensors.push_back(executorch::extension::make_tensor_ptr(
        std::move(sizes), const_cast<uint8_t*>(t->bytes.data()), scalar_type(t->dtype)));
    args.emplace_back(*tensors.back());
  }
  auto out = module.execute(method, args);
  if (!out.ok()) runtime_failure(where + ": method " + method + " failed (" + et_error_text(out.error()) + ")");
  return std::move(out.get());
}

}  // namespace ditskip
