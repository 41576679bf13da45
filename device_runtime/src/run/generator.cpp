// generation.py generate / Generator / check_request / cfg_branches / BlockInputs, step for step (see generator.h).
#include "run/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "bundle/bundle.h"
#include "bundle/rng.h"
#include "generate/floats.h"
#include "generate/hash_text.h"
#include "generate/lora_check.h"
#include "generate/picture.h"
#include "generate/sampler.h"
#include "generate/tiling.h"
#include "generate/weights.h"
#include "run/program_runner.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "train/footprint.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/sha256.h"

namespace ditskip {

using generate::Floats;
using generate::MappedWeights;

namespace {

constexpr int kGenerationFormatVersion = 3;
constexpr int64_t kMaxSteps = 1000;
const char* const kMergedFormat = "ditskip-edge-merged-lora";
const char* const kTextKinds[] = {"hash", "minilm", "pipeline"};
const char* const kManifest = "manifest.json";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Python's round(x, n): the exact binary value rounded to n decimals (glibc's printf rounds it exactly), as a float.
double py_round(double x, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", n, x);
  return std::strtod(buf, nullptr);
}

// str.isspace() of one code point (Python's whitespace: ASCII, \x1c-\x1f, and Unicode's Zs / Zl / Zp / B / S).
bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : 0;
    uint32_t cp = n == 0 ? b : n == 1 ? (b & 0x1F) : n == 2 ? (b & 0x0F) : (b & 0x07);
    ++i;
    for (int k = 0; k < n && i < s.size(); ++k, ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
    out.push_back(cp);
  }
  return out;
}

bool blank(const std::string& prompt) {
  for (uint32_t cp : code_points(prompt))
    if (!is_space(cp)) return false;
  return true;
}

// prompt.lower().strip(): SanaPipeline's preprocessing of the prompt (full lower case per character, text/unicode.h;
// then Python's whitespace stripped from both ends).
std::string lower_strip(const std::string& prompt) {
  const text::U32 lower = text::lowercase(text::utf32(prompt));
  size_t begin = 0, end = lower.size();
  while (begin < end && is_space(uint32_t(lower[begin]))) ++begin;
  while (end > begin && is_space(uint32_t(lower[end - 1]))) --end;
  return text::utf8(lower.substr(begin, end - begin));
}

std::string preprocess(const std::string& prompt, const json& rule) {
  const std::string r = rule.is_string() ? rule.get<std::string>() : "";
  if (r == "none") return prompt;
  if (r == "lower_strip") return lower_strip(prompt);
  refuse("generation.text.encoders[].tokenizer.preprocess " + py_repr(rule) + ": expected none or lower_strip");
}

std::string py_list(const std::vector<std::string>& items) { return py_repr(json(items)); }

std::string suffix_of(const std::string& path) {          // pathlib's Path.suffix
  const std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  const size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 || dot + 1 == name.size() ? "" : name.substr(dot);
}

TensorView view_of(const Floats& f) { return {"float32", f.shape, f.data.data()}; }
TensorView view_of(const generate::WeightView& w) { return {w.dtype, w.shape, w.data}; }

Floats floats_of(const HostTensor& t) {
  if (t.dtype != "float32") refuse("a program's output is " + t.dtype + ", expected float32");
  Floats f(t.shape);
  if (!f.data.empty()) std::memcpy(f.data.data(), t.bytes.data(), f.data.size() * 4);
  return f;
}

HostTensor host_of(const Floats& f) { return HostTensor::floats(f.shape, f.data.data()); }

// generation.py FootprintWatch: the largest RssAnon / RssFile growth over the baseline seen at any check.
class FootprintWatch {
 public:
  FootprintWatch() { has_base_ = read_footprint(base_); }
  void check() {
    Footprint f;
    if (has_base_ && read_footprint(f)) {
      peak_anon_ = std::max(peak_anon_, f.anon_bytes - base_.anon_bytes);
      peak_file_ = std::max(peak_file_, f.file_bytes - base_.file_bytes);
    }
  }
  json to_json() const {
    Footprint f;
    const bool now = read_footprint(f);
    json j = json::object();
    j["baseline_anon_bytes"] = has_base_ ? json(base_.anon_bytes) : json();
    j["peak_anon_growth_bytes"] = peak_anon_;
    j["peak_file_growth_bytes"] = peak_file_;
    j["peak_rss_bytes"] = now ? json(f.peak_rss_bytes) : json();
    j["counts"] = "growth over the process after importing the runtime: RssAnon (dirty anonymous, what a phone counts) "
                  "and RssFile (mapped programs and weights) apart, read after every program";
    return j;
  }

 private:
  Footprint base_;
  bool has_base_ = false;
  int64_t peak_anon_ = 0, peak_file_ = 0;
};

// generation.py Programs: one program loaded at a time; the footprint read after every call.
class Programs {
 public:
  Programs(const Bundle& bundle, FootprintWatch& watch) : bundle_(bundle), watch_(watch) {}
  NamedInputs operator()(const ProgramEntry& entry, const InputLookup& lookup) {
    if (!loaded_ || loaded_path_ != entry.path) {
      drop();
      ProgramEntry pte_only = entry;      // generation programs take their weights as inputs: the .pte alone, as
      pte_only.data.clear();              // generation.py loads it (the manifest's data lists the weights file)
      loaded_ = std::make_unique<ProgramRunner>(bundle_, pte_only);
      loaded_path_ = entry.path;
    }
    NamedInputs out = loaded_->run(lookup);
    watch_.check();
    return out;
  }
  void drop() {
    loaded_.reset();
    loaded_path_.clear();
  }

 private:
  const Bundle& bundle_;
  FootprintWatch& watch_;
  std::unique_ptr<ProgramRunner> loaded_;
  std::string loaded_path_;
};

// generation.py BlockInputs: the values so far, plus `w.<state>` -> <block>.<state> of the merged LoRA'd weights
// first, else of the base weights (views of the mapped files, handed over in place).
InputLookup block_inputs(const NamedInputs& values, const std::string& block, const MappedWeights* base,
                         const MappedWeights* merged) {
  return [&values, block, base, merged](const std::string& name, TensorView& out) {
    if (name.rfind("w.", 0) != 0) {
      const auto it = values.find(name);
      if (it == values.end()) return false;
      out = TensorView::of(it->second);
      return true;
    }
    const std::string key = block + "." + name.substr(2);
    if (merged != nullptr && merged->contains(key)) {
      out = view_of(merged->view(key));
      return true;
    }
    if (base == nullptr) refuse("no weights file for " + key + " (the program needs it)");
    if (!base->contains(key)) refuse(base->path() + ": no weight " + key + " (the program needs it)");
    out = view_of(base->view(key));
    return true;
  };
}

class Generator {
 public:
  Generator(const Bundle& bundle, const std::string& precision) : bundle_(bundle) {
    const std::string manifest = join_path(bundle.root(), kManifest);
    if (!bundle.manifest().contains("generation"))
      refuse(manifest + ": no generation part (compile with --generation)");
    gen_ = bundle.field({"generation"});
    const json version = gen_.contains("format_version") ? gen_["format_version"] : json();
    if (!py_equal(version, json(kGenerationFormatVersion)))
      refuse(manifest + ": generation part format " + py_str(version) + ", this runtime reads " +
             std::to_string(kGenerationFormatVersion) + ": recompile with --generation");
    const std::vector<std::string> precisions = gen_.at("precisions").get<std::vector<std::string>>();
    precision_ = precision.empty() ? precisions.at(0) : precision;
    if (std::find(precisions.begin(), precisions.end(), precision_) == precisions.end()) {
      std::string listed;
      for (const std::string& p : precisions) listed += (listed.empty() ? "" : ", ") + p;
      refuse("--precision " + precision_ + ": the bundle's generation programs are " + listed);
    }
    text_ = gen_.at("text");
    const json kind = text_.contains("kind") ? text_["kind"] : json();
    if (!kind.is_string() || std::none_of(std::begin(kTextKinds), std::end(kTextKinds),
                                          [&](const char* k) { return kind.get<std::string>() == k; }))
      refuse(manifest + ": generation.text.kind " + py_repr(kind) + ": this runtime reads hash, minilm, pipeline");
    kind_ = kind.get<std::string>();
    decode_ = gen_.at("decode");
    std::set<std::string> decode_names, text_names;
    for (auto it = decode_["programs"].begin(); it != decode_["programs"].end(); ++it)
      decode_names.insert(it.value().get<std::string>());
    for (const std::string& n : text_programs()) text_names.insert(n);
    const std::vector<ProgramEntry> all = bundle.programs();
    for (const ProgramEntry& p : all)
      if (p.runtime == "executorch" && (text_names.count(p.name) || decode_names.count(p.name))) put(p);
    for (const ProgramEntry& p : all)
      if (p.runtime == "executorch" && p.precision == precision_ &&
          (p.name == "gen_embed" || p.name == "gen_head" || p.name.rfind("gen_block.", 0) == 0))
        put(p);
    std::vector<std::string> need = {"gen_embed", "gen_head"};
    need.insert(need.end(), decode_names.begin(), decode_names.end());
    std::set<std::string> kinds;
    for (const json& b : gen_.at("blocks")) kinds.insert("gen_block." + b.at("kind").get<std::string>());
    need.insert(need.end(), kinds.begin(), kinds.end());
    need.insert(need.end(), text_names.begin(), text_names.end());
    std::vector<std::string> missing;
    for (const std::string& n : need)
      if (!entries_.count(n)) missing.push_back(n);
    if (!missing.empty()) refuse(manifest + ": generation programs " + py_list(missing) + " missing at " + precision_);
    weights_rel_ = gen_.at("weights").at(precision_).get<std::string>();
  }

  const json& gen() const { return gen_; }
  const std::string& precision() const { return precision_; }

  std::vector<std::string> text_programs() const {
    if (kind_ == "pipeline") {
      std::vector<std::string> out;
      for (const json& e : text_.at("encoders")) out.push_back(e.at("program").get<std::string>());
      return out;
    }
    return kind_ == "minilm" ? std::vector<std::string>{"text_encoder"} : std::vector<std::string>{};
  }

  std::vector<std::string> files() const {
    std::vector<std::string> rels = {weights_rel_};
    for (const std::string& n : order_) rels.push_back(entries_.at(n).path);
    if (decode_.contains("weights") && decode_["weights"].is_string() && !decode_["weights"].get<std::string>().empty())
      rels.push_back(decode_["weights"].get<std::string>());
    if (kind_ == "minilm") rels.push_back(text_.at("tokenizer").at("vocab").get<std::string>());
    if (kind_ == "pipeline")
      for (const json& e : text_.at("encoders")) rels.push_back(e.at("tokenizer").at("file").get<std::string>());
    return rels;
  }

  void verify() const {
    const std::vector<std::string> rels = files();
    bundle_.verify_files(&rels);
    const json& listed = bundle_.field({"files"});
    for (const std::string& r : rels)
      if (!listed.contains(r)) refuse(join_path(bundle_.root(), kManifest) + ": " + r + " is not listed in files");
  }

  const text::Tokenizer& tokenizer(const std::string& program) {
    auto it = tokenizers_.find(program);
    if (it == tokenizers_.end()) {
      std::unique_ptr<text::Tokenizer> tk;
      if (kind_ == "minilm") {
        const json& t = text_.at("tokenizer");
        tk = text::load_wordpiece_vocab(bundle_.path(t.at("vocab").get<std::string>()), t.at("max_len").get<int>());
      } else {
        const json& t = encoder(program).at("tokenizer");
        tk = text::load_tokenizer_json(bundle_.path(t.at("file").get<std::string>()), t.at("max_len").get<int>(),
                                       t.at("pad_id").get<int64_t>());
      }
      it = tokenizers_.emplace(program, std::move(tk)).first;
    }
    return *it->second;
  }

  const json& encoder(const std::string& program) const {
    for (const json& e : text_.at("encoders"))
      if (e.at("program").get<std::string>() == program) return e;
    refuse("generation.text.encoders: no encoder " + program);
  }

  void check_prompt(const std::string& prompt) {
    if (prompt.empty() || blank(prompt))
      refuse("--prompt is empty: describe the picture, e.g. 'a photo of sks dog on a beach'");
    int64_t n = 0, limit = 0;
    std::string unit;
    if (kind_ == "hash") {
      n = generate::hash_text::count_tokens(prompt);
      limit = text_.at("seq_len").get<int64_t>();
      unit = "words";
    } else if (kind_ == "minilm") {
      n = tokenizer("text_encoder").count_tokens(prompt);
      limit = text_.at("seq_len").get<int64_t>();
      unit = "WordPiece tokens incl. [CLS] [SEP]";
    } else {
      const json* limiting = nullptr;
      for (const json& e : text_.at("encoders"))
        if (limiting == nullptr && e.at("tokenizer").value("limits_prompt", false)) limiting = &e;
      if (limiting == nullptr) refuse("generation.text.encoders: none limits the prompt");
      const json& tk = limiting->at("tokenizer");
      n = tokenizer(limiting->at("program").get<std::string>()).count_tokens(preprocess(prompt, tk.at("preprocess")));
      limit = tk.at("max_len").get<int64_t>();
      unit = limiting->at("role").get<std::string>() + " tokens incl. special tokens";
    }
    if (n > limit)
      refuse("--prompt has " + std::to_string(n) + " " + unit + "; the text encoder takes at most " +
             std::to_string(limit) + ": shorten it");
    if (kind_ == "hash" && n == 0) refuse("--prompt has no words (letters or digits) for the hash text encoder");
  }

  // {branch: prompt} -> {branch: cond.<key>}; each text program loaded once and run for every branch.
  std::map<std::string, NamedInputs> encode(const std::vector<std::pair<std::string, std::string>>& prompts,
                                            Programs& programs) {
    std::map<std::string, NamedInputs> out;
    if (kind_ == "hash") {
      const std::string arch = bundle_.field({"model", "arch"}).get<std::string>();
      for (const auto& [b, p] : prompts)
        for (auto& [k, v] : generate::hash_text::encode(p, arch, text_.at("seq_len").get<int>(), text_.at("dim").get<int>(),
                                                        text_.value("pooled_dim", 0)))
          out[b][k] = host_of(v);
      return out;
    }
    for (const std::string& name : text_programs()) {
      for (const auto& [b, prompt] : prompts) {
        const std::string text =
            kind_ == "minilm" ? prompt : preprocess(prompt, encoder(name).at("tokenizer").at("preprocess"));
        const text::Encoding enc = tokenizer(name).encode(text);
        const std::vector<int64_t> shape = {1, int64_t(enc.input_ids.size())};
        NamedInputs outs = programs(entries_.at(name), [&](const std::string& n, TensorView& v) {
          if (n == "input_ids") v = {"int64", shape, enc.input_ids.data()};
          else if (n == "attention_mask") v = {"int64", shape, enc.attention_mask.data()};
          else return false;
          return true;
        });
        for (auto& [k, t] : outs) out[b][k] = std::move(t);
      }
    }
    return out;
  }

  std::string lora_file(const std::string& lora) const {
    return is_dir(lora) ? join_path(lora, bundle_.field({"lora_file", "name"}).get<std::string>()) : lora;
  }

  MappedWeights base_weights() const { return MappedWeights(bundle_.path(weights_rel_)); }

  // generation.py lora_weights: merged once at the weights' bit width into <lora dir>/merged/<precision>.safetensors,
  // reused while its metadata (the identity) is this LoRA's, these weights' and this precision's.
  std::unique_ptr<MappedWeights> lora_weights(const std::string& lora, const MappedWeights& base) const {
    const std::string path = lora_file(lora);
    auto tensors = generate::check_lora(bundle_, path, base);
    std::map<std::string, std::string> identity = {{"format", kMergedFormat}, {"lora_sha256", sha256_file(path)},
                                                   {"precision", precision_},
                                                   {"weights_sha256", bundle_.file_sha256(weights_rel_)}};
    const size_t cut = join_path(path, "").find_last_of('/');
    const std::string dir = cut == std::string::npos ? "." : join_path(path, "").substr(0, cut);
    const std::string out = join_path(join_path(dir, "merged"), precision_ + ".safetensors");
    if (is_file(out)) {
      try {
        auto merged = std::make_unique<MappedWeights>(out);
        json want = json::object();
        for (const auto& [k, v] : identity) want[k] = v;
        if (py_equal(merged->metadata(), want)) return merged;
      } catch (const Failure&) {
      } catch (const json::exception&) {
      }
    }
    const double scale = gen_.at("lora_scale").get<double>();
    std::set<std::string> modules;
    for (const auto& [k, m] : tensors) modules.insert(k.substr(0, k.rfind(".lora_")));
    std::map<std::string, std::pair<std::string, std::vector<int64_t>>> layout;
    auto short_name = [](const std::string& m) { return m.rfind("transformer.", 0) == 0 ? m.substr(12) : m; };
    for (const std::string& m : modules)
      for (const char* s : generate::kLoraStates) {
        const std::string key = short_name(m) + "." + s;
        if (base.contains(key)) layout[key] = {base.st_dtype(key), base.shape(key)};
      }
    generate::WeightsWriter writer(out, layout, identity);
    for (const std::string& m : modules) {                // one linear at a time
      const auto& a = tensors.at(m + ".lora_A.weight");
      const auto& b = tensors.at(m + ".lora_B.weight");
      const std::string name = short_name(m);
      std::map<std::string, generate::WeightView> own;
      for (const char* s : generate::kLoraStates)
        if (base.contains(name + "." + s)) own[s] = base.view(name + "." + s);
      for (const auto& [s, t] : generate::merge_lora(own, a.values, b.values, a.rows, scale)) writer.put(name + "." + s, t);
    }
    writer.commit();
    return std::make_unique<MappedWeights>(out);
  }

  // generation.py sample: -> (pixels [H, W, 3] in [0, 1], timings and footprint)
  Floats sample(const GenerateRequest& req, int64_t steps, double guidance, json& timing) {
    FootprintWatch watch;
    const auto t0 = std::chrono::steady_clock::now();
    const MappedWeights base = base_weights();
    std::unique_ptr<MappedWeights> merged;
    if (!req.lora.empty()) merged = lora_weights(req.lora, base);
    const double t_merge = seconds_since(t0);
    Programs programs(bundle_, watch);
    const std::vector<std::string> branches =
        guidance == 1.0 ? std::vector<std::string>{"cond"} : std::vector<std::string>{"uncond", "cond"};
    std::vector<std::pair<std::string, std::string>> prompts;
    for (const std::string& b : branches) prompts.emplace_back(b, b == "uncond" ? "" : req.prompt);
    std::map<std::string, NamedInputs> conds = encode(prompts, programs);
    programs.drop();
    const json& cond_keys = gen_.at("cond_keys");
    if (std::find(cond_keys.begin(), cond_keys.end(), json("guidance")) != cond_keys.end()) {
      const float g = gen_.at("guidance_embeds").get<float>();
      for (auto& [b, c] : conds) c["cond.guidance"] = HostTensor::floats({1}, &g);
    }
    const double t_text = seconds_since(t0) - t_merge;
    Floats x(gen_.at("latent_shape").get<std::vector<int64_t>>());
    rng::normal(req.seed, x.data.data(), int64_t(x.data.size()));
    const std::vector<float> sig = generate::sigmas_for(gen_.at("sampler"), int(steps));
    const auto t1 = std::chrono::steady_clock::now();
    const ProgramEntry& embed = entries_.at("gen_embed");
    const ProgramEntry& head = entries_.at("gen_head");
    for (int64_t i = 0; i < steps; ++i) {
      const Floats t({1}, {sig[size_t(i)]});
      std::map<std::string, NamedInputs> values;
      for (const std::string& b : branches) {
        const NamedInputs& cond = conds[b];
        values[b] = programs(embed, [&](const std::string& n, TensorView& v) {
          if (n == "x") v = view_of(x);
          else if (n == "t") v = view_of(t);
          else if (cond.count(n)) v = TensorView::of(cond.at(n));
          else return false;
          return true;
        });
      }
      for (const json& block : gen_.at("blocks")) {
        const ProgramEntry& entry = entries_.at("gen_block." + block.at("kind").get<std::string>());
        const std::string name = block.at("name").get<std::string>();
        for (const std::string& b : branches)
          for (auto& [k, v] : programs(entry, block_inputs(values[b], name, &base, merged.get()))) values[b][k] = std::move(v);
      }
      std::map<std::string, Floats> v;
      for (const std::string& b : branches) {
        NamedInputs outs = programs(head, block_inputs(values[b], "", nullptr, nullptr));
        if (!outs.count("v")) refuse(bundle_.path(head.path) + ": no output v");
        v[b] = floats_of(outs.at("v"));
      }
      values.clear();
      Floats& vg = v.at("cond");
      if (branches.size() == 2) generate::guided(v.at("uncond").data.data(), vg.data.data(), int64_t(vg.data.size()), guidance);
      if (vg.data.size() != x.data.size()) refuse(bundle_.path(head.path) + ": v has another shape than the latents");
      generate::euler_step(x.data.data(), vg.data.data(), int64_t(x.data.size()), sig[size_t(i)], sig[size_t(i) + 1]);
      if (req.progress && !req.progress("generate", int32_t(i + 1), int32_t(steps)))
        throw Failure(DITSKIP_CANCELLED, "cancelled after sampler step " + std::to_string(i + 1) + " of " +
                                             std::to_string(steps) + "; no picture written");
    }
    const double t_loop = seconds_since(t1);
    programs.drop();
    const Floats image = decode_latents(x, programs, req);
    programs.drop();
    const Floats pixels = generate::to_pixels(image);
    const double total = seconds_since(t0);
    timing = json::object();
    timing["seconds"] = py_round(total, 3);
    timing["seconds_merge"] = py_round(t_merge, 3);
    timing["seconds_text"] = py_round(t_text, 3);
    timing["seconds_sampling"] = py_round(t_loop, 3);
    timing["seconds_per_step"] = py_round(t_loop / double(steps), 4);
    timing["seconds_decode"] = py_round(total - t_loop - t_text - t_merge, 3);
    timing["footprint"] = watch.to_json();
    return pixels;
  }

  Floats decode_latents(const Floats& x, Programs& programs, const GenerateRequest& req) {
    const json& d = decode_;
    std::optional<MappedWeights> weights;
    if (d.contains("weights") && d["weights"].is_string() && !d["weights"].get<std::string>().empty())
      weights.emplace(bundle_.path(d["weights"].get<std::string>()));
    const std::string prefix = d.contains("weight_prefix") && d["weight_prefix"].is_string()
                                   ? d["weight_prefix"].get<std::string>() : "";
    const int64_t tile = d.at("tile_latent").get<int64_t>(), stride = d.at("stride_latent").get<int64_t>();
    const int64_t h = x.shape.at(2), w = x.shape.at(3);
    const int32_t tiles = int32_t(((h + stride - 1) / stride) * ((w + stride - 1) / stride));
    int32_t done = 0;
    auto decode_tile = [&](const Floats& latents) {
      const std::string key = generate::tile_key(latents.shape[2], latents.shape[3]);
      if (!d.at("programs").contains(key))
        refuse(join_path(bundle_.root(), kManifest) + ": generation.decode.programs has no program for tiles of " + key);
      const ProgramEntry& entry = entries_.at(d["programs"][key].get<std::string>());
      NamedInputs in;
      in["x"] = host_of(latents);
      NamedInputs outs = programs(entry, block_inputs(in, prefix, weights ? &*weights : nullptr, nullptr));
      if (!outs.count("image")) refuse(bundle_.path(entry.path) + ": no output image");
      ++done;
      if (req.progress && !req.progress("decode", done, tiles))
        throw Failure(DITSKIP_CANCELLED, "cancelled while decoding; no picture written");
      return floats_of(outs.at("image"));
    };
    return generate::decode_tiled(x, decode_tile, tile, stride, d.at("scale").get<int64_t>());
  }

 private:
  void put(const ProgramEntry& p) {
    if (!entries_.count(p.name)) order_.push_back(p.name);
    entries_[p.name] = p;
  }

  const Bundle& bundle_;
  json gen_, text_, decode_;
  std::string precision_, kind_, weights_rel_;
  std::map<std::string, ProgramEntry> entries_;
  std::vector<std::string> order_;                     // entries' insertion order (files() lists them so)
  std::map<std::string, std::unique_ptr<text::Tokenizer>> tokenizers_;
};

// generation.py check_request: everything a user can get wrong, before any work. -> (steps, guidance as JSON)
std::pair<int64_t, json> check_request(const GenerateRequest& req, Generator& gen) {
  gen.check_prompt(req.prompt);
  const json& sampler = gen.gen().at("sampler");
  const int64_t steps = req.steps < 0 ? sampler.at("default_steps").get<int64_t>() : req.steps;
  if (steps < 1 || steps > kMaxSteps)
    refuse("--steps " + std::to_string(steps) + ": expected an integer from 1 to " + std::to_string(kMaxSteps));
  const json guidance = req.has_guidance ? json(req.guidance) : sampler.at("guidance_scale");
  const double g = guidance.get<double>();
  if (!(std::isfinite(g) && g >= 0 && g <= 100))
    refuse("--guidance " + (guidance.is_number_float() ? py_float_repr(g) : py_str(guidance)) +
           ": expected a number in [0, 100]");
  if (req.seed >= (uint64_t(1) << 63)) refuse("--seed " + std::to_string(req.seed) + ": expected 0 <= seed < 2^63");
  if (!req.out.empty()) {
    const std::string out = join_path(req.out, "");
    std::string suffix = suffix_of(out);
    std::transform(suffix.begin(), suffix.end(), suffix.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (suffix != ".png") refuse("--out " + out + ": expected a .png path");
    if (is_dir(out)) refuse("--out " + out + " is a folder: expected a .png path");
  }
  return {steps, guidance};
}

}  // namespace

json generate_picture(const std::string& bundle_dir, const GenerateRequest& req) {
  const Bundle bundle = Bundle::open(bundle_dir, false);      // manifest digest; generation's files verified below
  Generator gen(bundle, req.precision);
  gen.verify();
  const auto [steps, guidance] = check_request(req, gen);
  if (!req.lora.empty()) generate::check_lora(bundle, gen.lora_file(req.lora), gen.base_weights());
  json timing;
  const Floats pixels = gen.sample(req, steps, guidance.get<double>(), timing);
  json summary = json::object();
  summary["prompt"] = req.prompt;
  summary["seed"] = req.seed;
  summary["steps"] = steps;
  summary["guidance"] = guidance;
  summary["precision"] = gen.precision();
  summary["lora"] = req.lora.empty() ? json() : json(join_path(req.lora, ""));
  summary["size_px"] = json::array({pixels.shape[0], pixels.shape[1]});
  for (auto it = timing.begin(); it != timing.end(); ++it) summary[it.key()] = it.value();
  if (!req.dump_image.empty()) generate::write_raw(req.dump_image, pixels);
  if (!req.out.empty()) summary["out"] = generate::write_png(req.out, pixels);
  return summary;
}

}  // namespace ditskip
