#include "train/step_inputs.h"

#include <cstring>

#include "bundle/rng.h"
#include "bundle/safetensors.h"
#include "run/cache_free_entries.h"
#include "util/failure.h"

namespace ditskip {

NamedInputs text_conditioning(const Bundle& bundle, int photo) {
  const std::string path = bundle.path(bundle.field({"subject_stage", "text_conditioning"}).get<std::string>());
  const bool per_photo = bundle.text_rows() == "per_photo";
  const int64_t want = per_photo ? int64_t(bundle.field({"subject_stage", "photos"}).size()) : 1;
  if (per_photo && !(0 <= photo && photo < want))
    refuse(bundle.root() + ": no photo " + std::to_string(photo) + " (the bundle holds " + std::to_string(want) + ")");
  StTensors tensors;
  StMetadata metadata;
  read_safetensors(path, tensors, metadata);
  NamedInputs out;
  for (auto& kv : tensors) {
    StTensor& t = kv.second;
    if (t.shape.empty() || t.shape[0] != want)
      refuse(bundle.root() + ": text conditioning " + kv.first + " has shape " + shape_repr(t.shape) + ", expected " +
             std::to_string(want) + " row(s) (" + bundle.text_rows() + ")");
    if (t.dtype != "F32") refuse(path + ": text conditioning " + kv.first + " is " + t.dtype + ", expected F32");
    HostTensor h;
    h.shape = t.shape;
    if (per_photo) {
      const size_t row_bytes = t.bytes.size() / size_t(want);
      h.shape[0] = 1;
      h.bytes.assign(t.bytes.begin() + int64_t(row_bytes) * photo, t.bytes.begin() + int64_t(row_bytes) * (photo + 1));
    } else {
      h.bytes = std::move(t.bytes);
    }
    out.emplace("cond." + kv.first, std::move(h));
  }
  return out;
}

void require_stored_cache(const Bundle& bundle) {
  (void)bundle.cache_mode();     // a model bundle, or a cache mode of another name, refused (bundle.py's lines)
}

StepInputs::StepInputs(const Bundle& bundle, const Schedule& schedule, Preprocessor* preprocess)
    : bundle_(bundle), preprocess_(preprocess) {
  require_stored_cache(bundle);
  if (bundle.cache_mode() != "stored") {    // inputs.py: x0-only / cache-free entries computed each step
    free_ = std::make_unique<CacheFreeEntries>(bundle, schedule, false);
  } else {
    const json identity = cache_identity(bundle, schedule.raw);
    cache_ = std::make_unique<CacheReader>(bundle.path(bundle.field({"subject_stage", "cache"}).get<std::string>()),
                                           &identity, int64_t(schedule.num_samples()));
  }
  per_photo_ = bundle.text_rows() == "per_photo";
  hold(0);                 // photo 0's row now: bad rows are refused before the first step
}

StepInputs::~StepInputs() = default;

void StepInputs::hold(int row) {
  held_cond_ = text_conditioning(bundle_, row);
  held_row_ = row;
}

NamedInputs StepInputs::operator()(const Sample& sample) {
  const int row = per_photo_ ? sample.photo : 0;
  if (row != held_row_) hold(row);
  NamedInputs named;
  if (free_) {
    named = (*free_)(sample, held_cond_);
  } else {
    const CacheEntry entry = cache_->read(sample.index);
    for (const CachePart& part : *entry.parts) {
      HostTensor t;
      t.dtype = part.dtype;
      t.shape = part.shape;
      const uint8_t* p = entry.bytes.data() + part.offset;
      t.bytes.assign(p, p + part.bytes);
      named.emplace(part.name == "x0" ? "x0" : "entry." + part.name, std::move(t));
    }
  }
  if (named.find("x0") == named.end()) refuse(bundle_.root() + ": cache entry " + std::to_string(sample.index) +
                                              " has no x0");
  if (preprocess_ != nullptr) named["x0"] = (*preprocess_)(sample);
  const HostTensor& x0 = named["x0"];
  HostTensor noise;
  noise.shape = x0.shape;
  noise.bytes.resize(size_t(x0.numel()) * sizeof(float));
  rng::normal(sample.noise_seed, reinterpret_cast<float*>(noise.bytes.data()), x0.numel());
  named["noise"] = std::move(noise);
  const float t = float(sample.t);
  named["t"] = HostTensor::floats({1}, &t);
  for (const auto& kv : held_cond_) named[kv.first] = kv.second;
  return named;
}

}  // namespace ditskip
