#include "train/preprocess.h"

#include "bundle/photos.h"
#include "train/executorch_module.h"
#include "util/failure.h"

namespace ditskip {

struct Preprocessor::Program {
  ProgramEntry entry;
  std::unique_ptr<Module> module;
};

Preprocessor::Preprocessor(const Bundle& bundle) : bundle_(bundle), photos_(bundle.field({"subject_stage", "photos"})) {}

Preprocessor::~Preprocessor() = default;

HostTensor Preprocessor::operator()(const Sample& sample) {
  if (!photos_.is_array() || sample.photo < 0 || size_t(sample.photo) >= photos_.size())
    refuse(bundle_.root() + ": no photo " + std::to_string(sample.photo) + " (the bundle holds " +
           std::to_string(photos_.is_array() ? photos_.size() : 0) + ")");
  PhotoPixels px = read_photo_pixels(bundle_.path(photos_[size_t(sample.photo)].get<std::string>()));
  const std::pair<int64_t, int64_t> hw{px.height, px.width};
  auto it = programs_.find(hw);
  if (it == programs_.end()) {
    std::unique_ptr<Program> found;
    for (const ProgramEntry& p : bundle_.programs()) {
      if (p.name != "preprocess" || p.runtime != "executorch" || p.inputs.empty()) continue;
      const auto& shape = p.inputs[0].shape;
      if (shape.size() >= 4 && shape[2] == px.height && shape[3] == px.width) {
        found.reset(new Program{p, open_module(bundle_.path(p.path))});
        load_method(*found->module, p.method, p.path);
        break;
      }
    }
    if (!found)
      refuse(bundle_.root() + ": no executorch preprocess program for photos of [" + std::to_string(px.height) +
             ", " + std::to_string(px.width) + "] px (compile with --runtime executorch)");
    it = programs_.emplace(hw, std::move(found)).first;
  }
  Program& prog = *it->second;
  HostTensor photo = HostTensor::floats({1, 3, px.height, px.width}, px.chw.data());
  const float crop[3] = {float(sample.crop_box[0]), float(sample.crop_box[1]), float(sample.crop_box[2])};
  HostTensor crop_box = HostTensor::floats({3}, crop);
  std::vector<EValue> out = run_method(*prog.module, prog.entry.method, {&photo, &crop_box}, prog.entry.path);
  if (out.empty() || !out[0].isTensor() || out[0].toTensor().scalar_type() != executorch::aten::ScalarType::Float)
    runtime_failure(prog.entry.path + ": output 0 (x0) is not a float32 tensor");
  auto x0 = out[0].toTensor();
  return HostTensor::floats(std::vector<int64_t>(x0.sizes().begin(), x0.sizes().end()), x0.const_data_ptr<float>());
}

}  // namespace ditskip
