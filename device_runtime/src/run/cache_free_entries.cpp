// subject.py CacheFreeEntries (see cache_free_entries.h).
#include "run/cache_free_entries.h"

#include <algorithm>
#include <cstring>

#include "bundle/rng.h"
#include "subject/codecs.h"
#include "util/failure.h"

namespace ditskip {

CacheFreeEntries::CacheFreeEntries(const Bundle& bundle, const Schedule& schedule, bool keep_blocks)
    : bundle_(bundle), fwd_(bundle, keep_blocks) {
  shapes_ = bundle.field({"subject_stage", "entry_shapes"});
  layout_ = entry_layout(bundle.field({"subject_stage", "cache_codec"}).get<std::string>(), shapes_, entry_bytes_);
  refuse_lowrank(layout_);
  if (bundle.cache_mode() == "x0-only") {
    const json identity = cache_identity(bundle, schedule.raw);
    x0_cache_ = std::make_unique<CacheReader>(bundle.path(bundle.field({"subject_stage", "cache"}).get<std::string>()),
                                              &identity, int64_t(schedule.num_samples()));
    std::vector<std::string> names;
    for (const CachePart& p : x0_cache_->parts()) names.push_back(p.name);
    if (names != std::vector<std::string>{"x0"}) {
      json held = json::array();
      std::sort(names.begin(), names.end());
      for (const auto& n : names) held.push_back(n);
      refuse(bundle.root() + ": an x0-only bundle whose cache holds " + py_repr(held) + ", not x0 alone");
    }
  }
}

NamedInputs CacheFreeEntries::operator()(const Sample& sample, const NamedInputs& cond) {
  FloatTensor x0;
  if (x0_cache_) {
    const CacheEntry e = x0_cache_->read(sample.index);
    const CachePart& p = x0_cache_->parts()[0];
    x0.shape = p.shape;
    x0.values.resize(size_t(p.bytes / 4));
    std::memcpy(x0.values.data(), e.bytes.data() + p.offset, size_t(p.bytes));
  } else {
    auto it = photos_.find(sample.photo);
    if (it == photos_.end()) {
      const json& rels = bundle_.field({"subject_stage", "photos"});
      if (sample.photo < 0 || size_t(sample.photo) >= rels.size())
        refuse(bundle_.root() + ": no photo " + std::to_string(sample.photo));
      it = photos_.emplace(sample.photo, read_photo_pixels(bundle_.path(rels[size_t(sample.photo)].get<std::string>()))).first;
    }
    x0 = fwd_.x0(it->second.chw.data(), it->second.height, it->second.width, sample.crop_box);
  }
  FloatTensor noise{x0.shape, std::vector<float>(x0.values.size())};
  rng::normal(sample.noise_seed, noise.values.data(), int64_t(noise.values.size()));
  std::map<std::string, FloatTensor> c;
  for (const auto& [k, v] : cond) {
    FloatTensor f{v.shape, std::vector<float>(v.bytes.size() / 4)};
    if (!v.bytes.empty()) std::memcpy(f.values.data(), v.bytes.data(), v.bytes.size());
    c[k] = std::move(f);
  }
  std::map<std::string, FloatTensor> tensors;
  for (auto& [name, r] : fwd_.residuals(x0, noise, float(sample.t), c)) tensors[name] = std::move(r);
  tensors["x0"] = std::move(x0);
  const std::vector<uint8_t> entry = encode_entry(layout_, entry_bytes_, tensors);
  NamedInputs named;
  for (const CachePart& part : layout_) {
    HostTensor t;
    t.dtype = part.dtype;
    t.shape = part.shape;
    t.bytes.assign(entry.begin() + part.offset, entry.begin() + part.offset + part.bytes);
    named.emplace(part.name == "x0" ? "x0" : "entry." + part.name, std::move(t));
  }
  return named;
}

}  // namespace ditskip
