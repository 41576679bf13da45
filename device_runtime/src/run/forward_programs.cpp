// runtime/forward.py ForwardPrograms on ExecuTorch (see forward_programs.h).
#include "run/forward_programs.h"

#include <algorithm>
#include <cstring>

#include "subject/patches.h"
#include "util/failure.h"

namespace ditskip {
namespace {

const char* const kRuntime = "executorch";

TensorView view_of(const FloatTensor& t) { return {"float32", t.shape, t.values.data()}; }

FloatTensor from_host(const HostTensor& h) {
  FloatTensor t{h.shape, std::vector<float>(size_t(h.numel()))};
  if (h.dtype != "float32") refuse("a forward program output is " + h.dtype + ", expected float32");
  if (!t.values.empty()) std::memcpy(t.values.data(), h.bytes.data(), t.values.size() * 4);
  return t;
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

}  // namespace

SubjectPrograms subject_programs(const Bundle& bundle) {
  const std::string where = bundle.path("manifest.json");
  std::map<std::string, std::vector<ProgramEntry>> by_name;
  for (const ProgramEntry& p : bundle.programs())
    if (p.runtime == kRuntime) by_name[p.name].push_back(p);
  SubjectPrograms out;
  const auto it = bundle.manifest().find("encode_tiling");
  if (it != bundle.manifest().end()) {
    out.tiling = *it;
  } else {
    const int64_t s_min = bundle.field({"schedule", "s_min_px"}).get<int64_t>();
    out.tiling = json{{"tile_px", s_min}, {"stride_px", s_min}, {"scale", nullptr}, {"tiled", false}, {"stages", 1},
                      {"programs", json{{tile_key(s_min, s_min), "encode"}}}};
  }
  const int stages = out.tiling.contains("stages") ? out.tiling["stages"].get<int>() : 1;
  std::vector<std::string> missing;
  const auto need = [&](const std::string& n) {
    if (by_name[n].empty() && std::find(missing.begin(), missing.end(), n) == missing.end()) missing.push_back(n);
  };
  std::vector<std::pair<std::string, std::vector<std::string>>> chains;
  for (auto p = out.tiling["programs"].begin(); p != out.tiling["programs"].end(); ++p) {
    std::vector<std::string> chain;
    const std::string name = p.value().get<std::string>();
    if (stages <= 1) chain.push_back(name);
    else for (int k = 0; k < stages; ++k) chain.push_back(name + ".s" + std::to_string(k));
    chains.emplace_back(p.key(), chain);
  }
  for (const auto& [key, chain] : chains)
    for (const auto& n : chain) need(n);
  need("embed");
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 4; ++i) list += (i ? ", " : "") + missing[i];
    refuse(where + ": no " + list + " program: this bundle cannot run the subject stage (compile it without "
           "--images: a model bundle)");
  }
  for (const auto& [key, chain] : chains) {
    std::vector<ProgramEntry> entries;
    for (const auto& n : chain) entries.push_back(by_name[n][0]);
    out.encoders.emplace_back(key, entries);
  }
  out.embed = by_name["embed"][0];
  for (const ProgramEntry& p : by_name["block"]) {
    const int b = p.raw["block"].get<int>();
    if (!out.blocks.count(b)) out.blocks[b] = p;
  }
  const json& plan = bundle.field({"plan"});
  const int num_blocks = plan["num_blocks"].get<int>(), n_front = plan["n_front"].get<int>(),
            n_back = plan["n_back"].get<int>();
  const int last = n_back ? num_blocks : n_front;
  std::vector<int> absent;
  for (int i = 0; i < last; ++i)
    if (!out.blocks.count(i)) absent.push_back(i);
  if (!absent.empty()) {
    std::string list = "[";
    for (size_t i = 0; i < absent.size() && i < 5; ++i) list += (i ? ", " : "") + std::to_string(absent[i]);
    refuse(where + ": no block program for blocks " + list + "] (the residuals need blocks 0.." +
           std::to_string(last - 1) + ")");
  }
  return out;
}

ForwardPrograms::ForwardPrograms(const Bundle& bundle, bool keep_blocks)
    : bundle_(bundle), programs_(subject_programs(bundle)), keep_blocks_(keep_blocks) {
  const json& plan = bundle.field({"plan"});
  num_blocks_ = plan["num_blocks"].get<int>();
  n_front_ = plan["n_front"].get<int>();
  n_back_ = plan["n_back"].get<int>();
  s_min_px_ = bundle.field({"schedule", "s_min_px"}).get<int64_t>();
}

void ForwardPrograms::check_loads() {
  for (const auto& [key, chain] : programs_.encoders)
    for (const ProgramEntry& e : chain) ProgramRunner(bundle_, e).check();
  ProgramRunner(bundle_, programs_.embed).check();
  for (const auto& [i, e] : programs_.blocks) ProgramRunner(bundle_, e).check();
}

std::vector<FloatTensor> ForwardPrograms::encode_shape(const std::vector<FloatTensor>& tiles) {
  const std::string key = tile_key(tiles[0].shape[2], tiles[0].shape[3]);
  const std::vector<ProgramEntry>* chain = nullptr;
  for (const auto& [k, c] : programs_.encoders)
    if (k == key) chain = &c;
  if (chain == nullptr) refuse(bundle_.path("manifest.json") + ": no encode program for tiles of " + key + " px");
  std::vector<FloatTensor> xs = tiles;
  for (size_t k = 0; k < chain->size(); ++k) {
    const ProgramEntry& entry = (*chain)[k];
    auto& slot = encode_[{key, int(k)}];
    if (!slot) {
      if (!keep_blocks_) encode_.clear();
      encode_[{key, int(k)}] = std::make_unique<ProgramRunner>(bundle_, entry);
    }
    ProgramRunner& runner = *encode_[{key, int(k)}];
    const std::string x_in = entry.inputs[0].name, y_out = entry.outputs[0].name;
    for (FloatTensor& x : xs) {
      NamedInputs out = runner.run([&](const std::string& name, TensorView& v) {
        if (name != x_in) return false;
        v = view_of(x);
        return true;
      });
      x = from_host(out.at(y_out));
    }
  }
  return xs;
}

FloatTensor ForwardPrograms::x0(const float* photo, int64_t height, int64_t width, const int64_t crop_box[3]) {
  const FloatTensor patch = crop_patch(photo, height, width, crop_box, s_min_px_);
  FloatTensor x0;
  const json& t = programs_.tiling;
  if (t["tiled"].get<bool>())
    x0 = encode_tiled(patch, t["tile_px"].get<int64_t>(), t["stride_px"].get<int64_t>(), t["scale"].get<int64_t>(),
                      [&](const std::vector<FloatTensor>& tiles) { return encode_shape(tiles); });
  else
    x0 = encode_shape({patch})[0];
  if (!keep_blocks_) encode_.clear();
  return x0;
}

ProgramRunner& ForwardPrograms::block(int i) {
  auto& slot = blocks_[i];
  if (!slot) slot = std::make_unique<ProgramRunner>(bundle_, programs_.blocks.at(i));
  return *slot;
}

std::vector<std::pair<std::string, FloatTensor>> ForwardPrograms::residuals(
    const FloatTensor& x0, const FloatTensor& noise, float t, const std::map<std::string, FloatTensor>& cond) {
  if (!embed_) embed_ = std::make_unique<ProgramRunner>(bundle_, programs_.embed);
  const FloatTensor t_tensor{{1}, {t}};
  NamedInputs out = embed_->run([&](const std::string& name, TensorView& v) {
    if (name == "x0") v = view_of(x0);
    else if (name == "noise") v = view_of(noise);
    else if (name == "t") v = view_of(t_tensor);
    else if (cond.count(name)) v = view_of(cond.at(name));
    else return false;
    return true;
  });
  if (!keep_blocks_) embed_.reset();
  // streams and context in the embed program's output order
  std::vector<std::pair<std::string, FloatTensor>> streams, embedded;
  std::map<std::string, FloatTensor> ctx;
  for (const TensorSpec& s : programs_.embed.outputs) {
    if (starts_with(s.name, "stream.")) streams.emplace_back(s.name, from_host(out.at(s.name)));
    else if (starts_with(s.name, "ctx.")) ctx[s.name] = from_host(out.at(s.name));
  }
  embedded = streams;
  std::vector<std::pair<std::string, FloatTensor>> res;
  const auto front = [&]() {
    for (size_t k = 0; k < streams.size(); ++k) {
      FloatTensor d{streams[k].second.shape, std::vector<float>(streams[k].second.values.size())};
      for (size_t i = 0; i < d.values.size(); ++i) d.values[i] = streams[k].second.values[i] - embedded[k].second.values[i];
      res.emplace_back("front." + streams[k].first.substr(7), std::move(d));
    }
  };
  const int back_start = num_blocks_ - n_back_;
  const int last = n_back_ ? num_blocks_ : n_front_;
  FloatTensor kept_out;
  for (int i = 0; i < last; ++i) {
    if (i == n_front_ && n_front_) front();
    if (i == back_start)
      for (const auto& [name, v] : streams)
        if (name == "stream.img") kept_out = v;
    NamedInputs o = block(i).run([&](const std::string& name, TensorView& v) {
      for (const auto& [sn, sv] : streams)
        if (sn == name) { v = view_of(sv); return true; }
      const auto c = ctx.find(name);
      if (c == ctx.end()) return false;
      v = view_of(c->second);
      return true;
    });
    if (!keep_blocks_) blocks_.erase(i);
    for (auto& [sn, sv] : streams)
      if (o.count(sn)) sv = from_host(o.at(sn));
  }
  if (n_front_ && last == n_front_) front();
  if (n_back_) {
    for (const auto& [name, v] : streams)
      if (name == "stream.img") {
        FloatTensor d{v.shape, std::vector<float>(v.values.size())};
        for (size_t i = 0; i < d.values.size(); ++i) d.values[i] = v.values[i] - kept_out.values[i];
        res.emplace_back("back.img", std::move(d));
      }
  }
  return res;
}

}  // namespace ditskip
