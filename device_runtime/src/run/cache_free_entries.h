// x0-only and cache-free subject bundles in training (ditskip_edge/runtime/subject.py CacheFreeEntries): a sample's
// encoded cache entry computed now, what a stored cache's read would give: x0 from the x0-only cache or from the
// bundle's photo by the encode program(s), the residuals by the skipped blocks' forward programs (ForwardPrograms,
// one block at a time unless keep_blocks), coded with the bundle's codec in memory.
#pragma once

#include <map>
#include <memory>

#include "bundle/bundle.h"
#include "bundle/cache_reader.h"
#include "bundle/photos.h"
#include "bundle/schedule.h"
#include "run/forward_programs.h"
#include "train/host_tensor.h"

namespace ditskip {

class CacheFreeEntries {
 public:
  // The bundle and schedule outlive this. Refuses an x0-only cache that holds more than x0.
  CacheFreeEntries(const Bundle& bundle, const Schedule& schedule, bool keep_blocks);
  // {"x0", "entry.<part>": as stored} for the sample; cond: {"cond.<key>": float32} of the sample's photo
  NamedInputs operator()(const Sample& sample, const NamedInputs& cond);

 private:
  const Bundle& bundle_;
  ForwardPrograms fwd_;
  std::vector<CachePart> layout_;
  int64_t entry_bytes_ = 0;
  json shapes_;
  std::unique_ptr<CacheReader> x0_cache_;
  std::map<int, PhotoPixels> photos_;
};

}  // namespace ditskip
