// x0 on the device (train --device-preprocess; runtime/executorch.py Preprocessor): the bundle's `preprocess`
// program for the photo's size (patch crop + encoder) on the photo's pixels [1, 3, H, W] and the sample's crop box
// float32[3] (x0_px, y0_px, side_px). One program per photo size, loaded when first needed and kept.
#pragma once

#include <map>
#include <memory>
#include <utility>

#include "bundle/bundle.h"
#include "bundle/schedule.h"
#include "train/host_tensor.h"

namespace ditskip {

class Preprocessor {
 public:
  explicit Preprocessor(const Bundle& bundle);
  ~Preprocessor();
  HostTensor operator()(const Sample& sample);     // x0 [1, C, h, w] float32

 private:
  struct Program;
  const Bundle& bundle_;
  json photos_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Program>> programs_;
};

}  // namespace ditskip
