// runtime/subject.py on the device (see subject_stage.h).
#include "run/subject_stage.h"

#include <algorithm>
#include <climits>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "bundle/bundle.h"
#include "bundle/cache_reader.h"
#include "bundle/rng.h"
#include "bundle/safetensors.h"
#include "run/forward_programs.h"
#include "subject/bundle_writer.h"
#include "subject/cache_writer.h"
#include "subject/codecs.h"
#include "subject/make_schedule.h"
#include "subject/patches.h"
#include "subject/photo_input.h"
#include "train/footprint.h"
#include "train/log.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/sha256.h"

namespace ditskip {
namespace {

const char* const kScheduleFile = "subject/schedule.json";
const char* const kTextFile = "subject/text_conditioning.safetensors";
const char* const kCacheDir = "subject/cache";
const char* const kPhotosDir = "subject/photos";

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double round_to(double x, int digits) {           // Python's round(x, digits) for the summary's timings
  const double f = std::pow(10.0, digits);
  return std::nearbyint(x * f) / f;
}

std::string resolved(const std::string& p) {      // Path.resolve() (strict=False: the last part may not exist)
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) != nullptr) return buf;
  const size_t slash = p.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  if (::realpath(parent.c_str(), buf) != nullptr) return join_path(buf, p.substr(slash == std::string::npos ? 0 : slash + 1));
  return p;
}

json shape_json(const std::vector<int64_t>& s) {
  json j = json::array();
  for (int64_t d : s) j.push_back(d);
  return j;
}

json spec_shape(const ProgramEntry& e, const std::string& name, const std::string& where) {
  for (const auto* list : {&e.inputs, &e.outputs})
    for (const TensorSpec& s : *list)
      if (s.name == name) return shape_json(s.shape);
  refuse(where + ": program " + e.path + " has no input or output " + py_repr(json(name)));
}

std::map<std::string, FloatTensor> prompt_conditioning(const Bundle& b, size_t index) {
  StTensors tensors;
  StMetadata meta;
  read_safetensors(b.path(b.field({"model_bundle", "prompts"})[index]["text_conditioning"].get<std::string>()), tensors,
                   meta);
  std::map<std::string, FloatTensor> out;
  for (const auto& [k, t] : tensors) {
    if (t.dtype != "F32") refuse("text conditioning " + k + ": expected F32, got " + t.dtype);
    FloatTensor f{t.shape, std::vector<float>(t.bytes.size() / 4)};
    if (!t.bytes.empty()) std::memcpy(f.values.data(), t.bytes.data(), t.bytes.size());
    out[k] = std::move(f);
  }
  return out;
}

// subject.py check_programs
void check_programs(const Bundle& b, const SubjectPrograms& progs) {
  const std::string where = b.path("manifest.json");
  const json& shapes = b.field({"model_bundle", "entry_shapes"});
  const int64_t s_min = b.field({"schedule", "s_min_px"}).get<int64_t>();
  const json x0_shape = shapes["x0"];
  const json& rec = progs.tiling;
  const bool tiled = rec["tiled"].get<bool>();
  if (tiled) {
    std::vector<std::string> want, have;
    for (const auto& [th, tw] : tile_shapes(s_min, s_min, rec["tile_px"].get<int64_t>(), rec["stride_px"].get<int64_t>()))
      want.push_back(tile_key(th, tw));
    for (const auto& [k, c] : progs.encoders) have.push_back(k);
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    if (want != have)
      refuse(where + ": encode_tiling lists tiles " + py_repr(json(have)) + ", not those of " + py_str(rec["tile_px"]) +
             "-px tiles every " + py_str(rec["stride_px"]) + " px on the " + std::to_string(s_min) + "-px crop");
  }
  for (const auto& [key, chain] : progs.encoders) {
    const int64_t th = std::stoll(key.substr(0, key.find('x'))), tw = std::stoll(key.substr(key.find('x') + 1));
    json want_x0 = json::array({x0_shape[0], x0_shape[1], th * x0_shape[2].get<int64_t>() / s_min,
                                tw * x0_shape[3].get<int64_t>() / s_min});
    const ProgramEntry &first = chain.front(), &last = chain.back();
    const json patch = spec_shape(first, "patch", where);
    if (!py_equal(json::array({patch[2], patch[3]}), json::array({th, tw})) ||
        !py_equal(spec_shape(last, "x0", where), want_x0) || (!tiled && (th != s_min || tw != s_min)))
      refuse(where + ": " + first.path + " is not this model's encoder (patch/x0 shapes differ from the " + key +
             " px " + (tiled ? "tile" : "s_min crop") + " and entry_shapes x0 " + py_repr(x0_shape) + ")");
    for (size_t k = 1; k < chain.size(); ++k) {
      const json gives = shape_json(chain[k - 1].outputs[0].shape), takes = shape_json(chain[k].inputs[0].shape);
      if (!py_equal(gives, takes))
        refuse(where + ": encoder stage " + chain[k].path + " takes " + py_repr(takes) + ", " + chain[k - 1].path +
               " gives " + py_repr(gives) + ": the stages are not one encoder's");
    }
  }
  json streams = json::object();
  for (const TensorSpec& o : progs.embed.outputs) streams[o.name] = shape_json(o.shape);
  for (auto it = shapes.begin(); it != shapes.end(); ++it) {
    const std::string& name = it.key();
    const auto stream = [&](const std::string& s) { return streams.contains(s) ? streams[s] : json(nullptr); };
    if ((name.rfind("front.", 0) == 0 && !py_equal(stream("stream." + name.substr(6)), it.value())) ||
        (name == "back.img" && !py_equal(stream("stream.img"), it.value())))
      refuse(where + ": " + progs.embed.path + " is not this model's (its streams " + py_repr(streams) +
             " do not give the residual " + name + " " + py_repr(it.value()) + ")");
  }
  json block_in = json::object();
  for (auto it = streams.begin(); it != streams.end(); ++it)
    if (it.key().rfind("stream.", 0) == 0 || it.key().rfind("ctx.", 0) == 0) block_in[it.key()] = it.value();
  for (const auto& [i, p] : progs.blocks) {
    json ins = json::object();
    for (const TensorSpec& s : p.inputs) ins[s.name] = shape_json(s.shape);
    if (!py_equal(ins, block_in))
      refuse(where + ": block program " + p.path + " takes " + py_repr(ins) + ", not what " + progs.embed.path +
             " gives: it is another model's");
  }
  const auto cond = prompt_conditioning(b, 0);
  json want_cond = json::object(), got_cond = json::object();
  for (const auto& [k, v] : cond) want_cond["cond." + k] = shape_json(v.shape);
  for (const TensorSpec& s : progs.embed.inputs)
    if (s.name.rfind("cond.", 0) == 0) got_cond[s.name] = shape_json(s.shape);
  if (!py_equal(want_cond, got_cond))
    refuse(where + ": " + progs.embed.path + " takes text conditioning " + py_repr(got_cond) +
           ", the bundle's prompts give " + py_repr(want_cond));
  int64_t entry_bytes = 0;
  const auto layout = entry_layout(b.field({"model_bundle", "cache_codec"}).get<std::string>(), shapes, entry_bytes);
  json expect = json::array({"x0", "noise", "t"});
  for (const auto& [k, v] : cond) expect.push_back("cond." + k);   // std::map: sorted
  std::vector<std::string> parts;
  for (const auto& p : layout)
    if (p.name != "x0") parts.push_back(p.name);
  std::sort(parts.begin(), parts.end());
  for (const auto& p : parts) expect.push_back("entry." + p);
  for (const ProgramEntry& p : b.programs()) {
    if (p.name != "train_step") continue;
    json names = json::array();
    for (const TensorSpec& s : p.inputs) names.push_back(s.name);
    if (!py_equal(names, expect)) {
      json a = json::array(), e = json::array();
      for (size_t k = 0; k < 6 && k < names.size(); ++k) a.push_back(names[k]);
      for (size_t k = 0; k < 6 && k < expect.size(); ++k) e.push_back(expect[k]);
      refuse(where + ": training program " + p.path + " takes " + py_repr(a) + ".., not this codec's entry " +
             py_repr(e) + "..");
    }
  }
}

std::string run_identity(const Bundle& model, const std::vector<UserPhoto>& photos, const std::string& prompt,
                         const std::string& mode) {
  json d = json::object();
  d["model_bundle"] = model.manifest_sha256();
  json ph = json::array();
  for (const auto& p : photos) ph.push_back(json::array({p.name, p.sha256}));
  d["photos"] = ph;
  d["prompt"] = prompt;
  d["cache_mode"] = mode;
  PyDumps how;
  how.sort_keys = true;
  return sha256_hex(py_dumps(d, how));
}

// subject.py check_partial
void check_partial(const std::string& work, const std::string& identity, bool resume) {
  if (!path_exists(work)) return;
  const std::string journal = join_path(join_path(work, kCacheDir), "cache_journal.jsonl");
  json header(nullptr);
  if (resume && is_file(journal)) {
    const std::string text = read_text(journal);
    try {
      const json first = json::parse(text.substr(0, text.find('\n')));
      if (first.is_object() && first.contains("header")) header = first["header"];
    } catch (const json::exception&) {
      header = nullptr;
    }
  }
  if (!header.is_null()) {
    const json run = header.is_object() && header.contains("run") ? header["run"] : json(nullptr);
    if (!py_equal(run, json(identity)))
      refuse(work + ": an interrupted subject stage for other inputs (another model bundle, other photos, prompt or "
             "mode): delete it or pass --no-resume");
    return;
  }
  remove_tree(work);
}

struct Stopped {};

}  // namespace

json personalize(const std::string& model_dir, const std::string& photos_dir, const SubjectConfig& cfg,
                 bool& cancelled) {
  cancelled = false;
  const auto t_start = Clock::now();
  if (cfg.cache_mode != "stored" && cfg.cache_mode != "x0-only" && cfg.cache_mode != "cache-free")
    refuse("cache mode " + py_repr(json(cfg.cache_mode)) + ": expected one of stored, x0-only, cache-free");
  const Bundle model = Bundle::open(model_dir, true);
  if (model.kind() != "model")
    refuse(model.root() + " is a subject bundle (it already has photos and a schedule): train it; the subject stage "
           "takes a model bundle (ditskip-edge compile without --images)");
  const SubjectPrograms progs = subject_programs(model);
  check_programs(model, progs);
  if (cfg.cache_mode != "x0-only") {    // a lowrank residual: refused now, not at the first entry
    int64_t bytes = 0;
    refuse_lowrank(entry_layout(model.field({"model_bundle", "cache_codec"}).get<std::string>(),
                                model.field({"model_bundle", "entry_shapes"}), bytes));
  }
  std::vector<std::string> prompts;
  for (const json& p : model.field({"model_bundle", "prompts"})) prompts.push_back(p["prompt"].get<std::string>());
  const std::string prompt = cfg.has_prompt ? cfg.prompt : prompts.at(0);
  const auto pit = std::find(prompts.begin(), prompts.end(), prompt);
  if (pit == prompts.end())
    refuse("prompt " + py_repr(json(prompt)) + " is not one of the model bundle's prompts " + py_repr(json(prompts)) +
           " (the text encoder stays on the host: compile the model bundle with it)");
  const size_t p_index = size_t(pit - prompts.begin());
  const ScheduleConfig sched_cfg = ScheduleConfig::from_json(model.field({"schedule"}));
  const std::vector<UserPhoto> photos =
      load_user_photos(photos_dir, sched_cfg.s_max_px, model.field({"model_bundle", "min_photos"}).get<int>());
  std::vector<std::pair<int64_t, int64_t>> original, sizes;
  std::vector<std::string> names;
  for (const auto& p : photos) {
    original.emplace_back(p.original_height, p.original_width);
    sizes.emplace_back(p.height, p.width);
    names.push_back(p.name);
  }
  check_photo_sizes(sched_cfg, original, names);
  const json schedule = make_schedule(sched_cfg, sizes, names);
  std::string out = cfg.out_dir;
  if (out.empty()) {
    out = model_dir;
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    out += "-subject";
  }
  const std::string work = work_dir_for(out);
  if (path_exists(out) && !cfg.overwrite) refuse(out + " already exists: choose another --out or pass --force");
  ForwardPrograms fwd(model, cfg.keep_blocks);
  fwd.check_loads();
  const std::string identity = run_identity(model, photos, prompt, cfg.cache_mode);
  check_partial(work, identity, cfg.resume);
  // schedule.py's warning, once every check has passed (a refusal stays one line)
  if (schedule["clamped_samples"].get<int64_t>() > 0)          // schedule.py's warning
    log_message(kLogWarning, std::to_string(schedule["clamped_samples"].get<int64_t>()) + " of " +
                                 std::to_string(schedule["samples"].size()) + " crops were clamped: a photo's short "
                                 "side is below crop-max " + std::to_string(sched_cfg.s_max_px) + " px");
  const std::string prompt_rel = model.field({"model_bundle", "prompts"})[p_index]["text_conditioning"].get<std::string>();
  const int64_t num_samples = int64_t(schedule["samples"].size());
  json summary = json::object();
  summary["model_bundle"] = resolved(model.root());
  summary["bundle"] = resolved(out);
  summary["cache_mode"] = cfg.cache_mode;
  summary["prompt"] = prompt;
  summary["photos"] = int64_t(photos.size());
  summary["num_samples"] = num_samples;
  Footprint fp_start;
  const bool have_fp = read_footprint(fp_start);

  // _write_subject_bundle
  const auto t0 = Clock::now();
  BundleWriter w(out, cfg.overwrite, work);
  json stage = json::object();
  try {
    static const char* const keep[] = {"created_by", "model", "plan", "lora", "optimizer", "model_stage", "lora_file",
                                       "schedule", "programs", "generation", "encode_tiling"};
    for (const char* k : keep)
      if (model.manifest().contains(k)) w.manifest[k] = model.manifest()[k];
    const json& files = model.field({"files"});
    for (auto it = files.begin(); it != files.end(); ++it) w.link(model.path(it.key()), it.key(), &it.value());
    json photo_rels = json::array();
    for (size_t i = 0; i < photos.size(); ++i) {
      char rel[64];
      std::snprintf(rel, sizeof rel, "%s/%03zu.png", kPhotosDir, i);
      save_photo_png(photos[i], w.path(rel));
      photo_rels.push_back(rel);
    }
    atomic_write(w.path(kScheduleFile), schedule_text(schedule));
    w.link(model.path(prompt_rel), kTextFile, &files[prompt_rel]);
    stage["schedule"] = kScheduleFile;
    stage["text_conditioning"] = kTextFile;
    stage["photos"] = photo_rels;
    stage["prompt"] = prompt;
    stage["num_samples"] = num_samples;
    stage["clamped_crops"] = schedule["clamped_samples"];
    const json& entry_shapes = model.field({"model_bundle", "entry_shapes"});
    stage["entry_shapes"] = entry_shapes;
    const std::string codec = model.field({"model_bundle", "cache_codec"}).get<std::string>();
    stage["cache_codec"] = codec;
    stage["cache_mode"] = cfg.cache_mode;
    stage["computed_by"] = "device";
    stage["model_bundle_sha256"] = model.manifest_sha256();
    stage["run_identity"] = identity;
    w.manifest["bundle_kind"] = "subject";
    int64_t peak_anon = 0, peak_file = 0;
    if (cfg.cache_mode == "stored" || cfg.cache_mode == "x0-only") {
      // write_cache
      const bool with_residuals = cfg.cache_mode == "stored";
      CacheWriter writer(join_path(w.root(), kCacheDir), cache_identity(model, schedule), codec, kDefaultShardBytes,
                         identity);
      json shapes = json::object();
      if (with_residuals) shapes = entry_shapes;
      else shapes["x0"] = entry_shapes["x0"];
      writer.set_shapes(shapes);
      const int64_t start = writer.next_index();
      std::map<std::string, FloatTensor> cond;
      for (auto& [k, v] : prompt_conditioning(model, p_index)) cond["cond." + k] = std::move(v);
      const std::string bar = with_residuals ? "subject stage (residual cache)" : "subject stage (x0 cache)";
      const auto tc = Clock::now();
      int64_t computed = 0;
      for (int64_t k = start; k < num_samples; ++k) {
        const json& s = schedule["samples"][size_t(k)];
        const int photo = s[1].get<int>();
        const int64_t box[3] = {s[3][0].get<int64_t>(), s[3][1].get<int64_t>(), s[3][2].get<int64_t>()};
        const UserPhoto& ph = photos[size_t(photo)];
        FloatTensor x0 = fwd.x0(ph.chw.data(), ph.height, ph.width, box);
        std::map<std::string, FloatTensor> tensors;
        json extra = json::object();
        if (!with_residuals) {
          tensors["x0"] = std::move(x0);
          writer.add(k, encode_entry(writer.layout(), writer.entry_bytes(), tensors), extra);
        } else {
          FloatTensor noise{x0.shape, std::vector<float>(x0.values.size())};
          rng::normal(s[4].get<uint64_t>(), noise.values.data(), int64_t(noise.values.size()));
          const auto residuals = fwd.residuals(x0, noise, float(s[2].get<double>()), cond);
          tensors["x0"] = std::move(x0);
          for (const auto& [name, r] : residuals) tensors[name] = r;
          const std::vector<uint8_t> entry = encode_entry(writer.layout(), writer.entry_bytes(), tensors);
          json rel = json::object();
          for (const auto& [name, r] : residuals) {
            const std::vector<float> dec = decode_residual(writer.layout(), entry.data(), name, r.shape);
            rel[name] = relative_error(dec.data(), r.values.data(), int64_t(r.values.size()));
          }
          extra["rel_error"] = rel;
          writer.add(k, entry, extra);
        }
        ++computed;
        Footprint fp;
        if (read_footprint(fp)) peak_anon = std::max(peak_anon, fp.anon_bytes), peak_file = std::max(peak_file, fp.file_bytes);
        bool go_on = true;
        if (cfg.progress != nullptr) go_on = cfg.progress(bar.c_str(), int32_t(writer.next_index()), int32_t(num_samples),
                                                          cfg.progress_user_data);
        const bool stop = cfg.stop_after > 0 && computed >= cfg.stop_after;
        if ((stop || !go_on) && writer.next_index() < num_samples) {
          writer.close();
          summary["entries_done"] = writer.next_index();
          cancelled = !go_on && !stop;
          throw Stopped{};
        }
      }
      const double seconds = seconds_since(tc);
      json errors = json::object();
      for (const json& extra : writer.extras())
        if (extra.contains("rel_error"))
          for (auto it = extra["rel_error"].begin(); it != extra["rel_error"].end(); ++it) {
            if (!errors.contains(it.key())) errors[it.key()] = json::array();
            errors[it.key()].push_back(it.value());
          }
      json rel = json::object();
      for (auto it = errors.begin(); it != errors.end(); ++it) {
        double sum = 0, mx = -INFINITY;
        for (const json& v : it.value()) sum += v.get<double>(), mx = std::max(mx, v.get<double>());
        rel[it.key()] = json{{"mean", sum / double(it.value().size())}, {"max", mx}};
      }
      const json index = writer.finish(json{{"rel_error", rel}});
      for (auto it = rel.begin(); it != rel.end(); ++it)          // subject.py CACHE_WARN_REL_ERROR
        if (it.value()["max"].get<double>() > 0.05) {
          char pct[32];
          std::snprintf(pct, sizeof pct, "%.1f%%", 100 * it.value()["max"].get<double>());
          log_message(kLogWarning, "residual cache codec " + codec + ": " + it.key() + " has relative error up to " + pct);
        }
      stage["cache"] = kCacheDir;
      stage["cache_rel_error"] = rel;
      stage["cache_entry_bytes"] = index["entry_bytes"];
      stage["resumed_entries"] = start;
      stage["computed_entries"] = computed;
      stage["seconds_per_sample"] = round_to(seconds / double(std::max<int64_t>(computed, 1)), 4);
    } else {
      int64_t entry_bytes = 0;
      entry_layout(codec, entry_shapes, entry_bytes);
      stage["cache"] = nullptr;
      stage["cache_entry_bytes"] = entry_bytes;
    }
    stage["seconds"] = round_to(seconds_since(t0), 3);
    w.manifest["subject_stage"] = stage;
    w.commit();
    summary["seconds"] = round_to(seconds_since(t_start), 3);
    summary["seconds_per_sample"] = stage.contains("seconds_per_sample") ? stage["seconds_per_sample"] : json(nullptr);
    summary["cache_entry_bytes"] = stage["cache_entry_bytes"];
    summary["resumed_entries"] = stage.contains("resumed_entries") ? stage["resumed_entries"] : json(0);
    summary["computed_entries"] = stage.contains("computed_entries") ? stage["computed_entries"] : json(0);
    if (have_fp && peak_anon) {
      json f = json::object();
      f["what"] = "RssAnon (dirty anonymous: what a phone counts) and RssFile, bytes, of this process: at the start of "
                  "the stage (model bundle open and checked, nothing computed) and the peak after each sample";
      f["at_start_anon_bytes"] = fp_start.anon_bytes;
      f["peak_anon_bytes"] = peak_anon;
      f["peak_file_bytes"] = peak_file;
      summary["footprint"] = f;
    }
  } catch (const Stopped&) {
    summary["interrupted_at_entry"] = summary["entries_done"];
    summary["work_dir"] = work;
    return summary;
  } catch (...) {
    w.discard();
    throw;
  }
  return summary;
}

}  // namespace ditskip
