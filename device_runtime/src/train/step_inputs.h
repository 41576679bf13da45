// One scheduled sample -> the training step's named inputs (ditskip_edge/runtime/inputs.py StepInputs):
//
//     x0       the cache entry's clean latents (or, with device preprocessing, the preprocess program's output)
//     noise    rng::normal(sample.noise_seed, numel(x0)), shaped as x0
//     t        [float32(sample.t)]
//     cond.*   the bundle's text conditioning (with per-photo captions: the row of the sample's photo)
//     entry.*  the cache entry's stored parts except x0, as stored (the program decodes them)
//
// An x0-only or cache-free bundle's entry is computed each step by the subject stage's forward programs
// (run/cache_free_entries.h, subject.py CacheFreeEntries; one block program at a time).
#pragma once

#include <memory>

#include "bundle/bundle.h"
#include "bundle/cache_reader.h"
#include "bundle/schedule.h"
#include "train/host_tensor.h"
#include "train/preprocess.h"

namespace ditskip {

class CacheFreeEntries;

// Refuses a model bundle (bundle.py's message) and a cache mode of another name.
void require_stored_cache(const Bundle& bundle);

// bundle.py Bundle.text_conditioning(photo): {key: [1, ...] float32}; every tensor must have the rows text_rows says
NamedInputs text_conditioning(const Bundle& bundle, int photo);

class StepInputs {
 public:
  // preprocess: x0 from the photos (nullptr: the cache's x0). The bundle, schedule and preprocessor outlive this.
  StepInputs(const Bundle& bundle, const Schedule& schedule, Preprocessor* preprocess);
  ~StepInputs();
  NamedInputs operator()(const Sample& sample);

 private:
  const Bundle& bundle_;
  Preprocessor* preprocess_;
  std::unique_ptr<CacheReader> cache_;
  std::unique_ptr<CacheFreeEntries> free_;    // x0-only / cache-free bundles
  bool per_photo_;
  int held_row_ = -1;
  NamedInputs held_cond_;     // one row held at a time (samples come in schedule order, photos in any order)
  void hold(int row);
};

}  // namespace ditskip
