#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "train/checkpoint.h"
#include "train/lora_file.h"
#include "util/failure.h"
#include "util/files.h"

namespace ditskip {

namespace {

const char kLoraDir[] = "lora";
const char kSummaryFile[] = "summary.json";
const char kFootprintWhat[] =
    "RssAnon (dirty anonymous: what a phone counts) and RssFile (file-backed), bytes, of this process after the "
    "program's first run and after each step";

std::string resolved(const std::string& path) {            // Path.resolve()
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) != nullptr ? std::string(buf) : path;
}

double py_round4(double x) {                                // Python's round(x, 4): correctly rounded decimal
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", x);
  return std::strtod(buf, nullptr);
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

Trainer::Trainer(const Bundle& bundle, TrainConfig cfg) : bundle_(bundle), cfg_(std::move(cfg)) {
  if (cfg_.checkpoint_every < 1)
    refuse("--checkpoint-every " + std::to_string(cfg_.checkpoint_every) + ": expected >= 1");
  entry_ = bundle.find_program("train_step", kRuntime, cfg_.precision);
  const std::string program_digest = program_sha256(bundle, entry_);
  program_ = std::make_unique<TrainProgram>(bundle, entry_);
  if (cfg_.device_preprocess) preprocess_ = std::make_unique<Preprocessor>(bundle);
  require_stored_cache(bundle);
  schedule_ = load_schedule(bundle.path(bundle.field({"subject_stage", "schedule"}).get<std::string>()));
  inputs_ = std::make_unique<StepInputs>(bundle, schedule_, preprocess_.get());

  total_ = schedule_.steps;
  if (cfg_.steps != -1) {
    if (!(1 <= cfg_.steps && cfg_.steps <= schedule_.steps))
      refuse("--steps " + std::to_string(cfg_.steps) + ": expected 1 to " + std::to_string(schedule_.steps) +
             " (the bundle's schedule has " + std::to_string(schedule_.steps) + " steps)");
    total_ = cfg_.steps;
  }
  if (int64_t(schedule_.samples.size()) < int64_t(schedule_.steps) * schedule_.grad_accum)
    refuse(bundle.path(bundle.field({"subject_stage", "schedule"}).get<std::string>()) + ": " +
           std::to_string(schedule_.samples.size()) + " samples, expected steps x grad_accum = " +
           std::to_string(int64_t(schedule_.steps) * schedule_.grad_accum));

  program_->forward_backward((*inputs_)(schedule_.samples.at(0)));     // loop.py adapter.prepare
  optimizer_spec_ = bundle.optimizer();
  adamw_ = std::make_unique<AdamW>(optimizer_spec_, program_->numels());
  identity_ = run_identity(kRuntime, program_digest, bundle.manifest_sha256());

  run_dir_ = cfg_.run_dir.empty() ? join_path(join_path(bundle.root(), "runs"), kRuntime) : cfg_.run_dir;
  make_dirs(run_dir_);
  const std::string ckpt_path = join_path(run_dir_, kCheckpointFile);
  if (cfg_.resume && is_file(ckpt_path)) {
    CheckpointState ck = load_checkpoint(ckpt_path, identity_);
    const std::vector<std::string>& names = program_->names();
    const std::set<std::string> live(names.begin(), names.end());
    std::set<std::string> saved;
    for (const auto& kv : ck.params) saved.insert(kv.first);
    bool same = saved == live;
    for (size_t i = 0; same && i < names.size(); ++i) {
      const size_t n = size_t(program_->numels()[i]);
      same = ck.params[names[i]].size() == n && ck.m.count(names[i]) && ck.m[names[i]].size() == n &&
             ck.v.count(names[i]) && ck.v[names[i]].size() == n;
    }
    if (!same) refuse(ckpt_path + ": its parameters are not the program's; delete it or pass --no-resume");
    for (size_t i = 0; i < names.size(); ++i) {
      const std::vector<float>& p = ck.params[names[i]];
      std::copy(p.begin(), p.end(), program_->parameters()[i]);
      adamw_->m[i] = ck.m[names[i]];
      adamw_->v[i] = ck.v[names[i]];
    }
    adamw_->step_count = ck.optimizer_steps;
    start_ = ck.step;
    losses_ = ck.losses;
  }
}

Trainer::~Trainer() = default;

void Trainer::checkpoint(int64_t step) const {
  std::vector<const float*> params(program_->parameters().begin(), program_->parameters().end()), m, v;
  for (size_t i = 0; i < params.size(); ++i) {
    m.push_back(adamw_->m[i].data());
    v.push_back(adamw_->v[i].data());
  }
  save_checkpoint(join_path(run_dir_, kCheckpointFile), step, losses_, identity_, adamw_->step_count,
                  program_->names(), program_->shapes(), params, m, v);
}

void Trainer::check_budget(const Footprint& now, const std::string& when) const {
  if (cfg_.budget_anon_bytes > 0 && now.anon_bytes > cfg_.budget_anon_bytes)
    throw Failure(DITSKIP_OVER_BUDGET, "RssAnon " + mib(now.anon_bytes) + " " + when + " is over the budget of " +
                                           mib(cfg_.budget_anon_bytes) + "; the checkpoint in " + run_dir_ +
                                           " was left as it was");
}

json Trainer::interrupted(int64_t step) const {
  json out = json::object();
  out["interrupted_at_step"] = step;
  out["run_dir"] = run_dir_;
  out["losses"] = losses_;
  return with_run_fields(out);
}

json Trainer::with_run_fields(json summary) const {      // what run.py adds, and which core ran
  summary["cache_mode"] = bundle_.cache_mode();
  summary["device_preprocess"] = cfg_.device_preprocess;
  summary["implementation"] = "native";
  return summary;
}

ditskip_status Trainer::run() {
  if (ran_) refuse("this trainer already ran: create another to train again");
  ran_ = true;
  const int accum = schedule_.grad_accum;
  Footprint at_start;
  const bool have_footprint = read_footprint(at_start);   // the program loaded and run once: what steps add is on top
  if (have_footprint) check_budget(at_start, "after the program's first run");
  std::vector<std::vector<float>> grads;
  for (int64_t n : program_->numels()) grads.emplace_back(size_t(n), 0.0f);
  std::vector<std::vector<int64_t>> per_step;
  int done_now = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = start_; step < total_; ++step) {
    if (cancel_.load()) {
      summary_ = interrupted(step);
      return DITSKIP_CANCELLED;
    }
    for (auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
    double step_loss = 0.0;
    const float accum_f = float(accum);
    const Sample* samples = schedule_.samples_for_step(int(step));
    for (int s = 0; s < accum; ++s) {
      const float loss = program_->forward_backward((*inputs_)(samples[s]));
      const std::vector<const float*>& g = program_->gradients();
      for (size_t i = 0; i < grads.size(); ++i) {
        float* sum = grads[i].data();
        const float* gi = g[i];
        for (size_t e = 0; e < grads[i].size(); ++e) sum[e] += gi[e] / accum_f;
      }
      step_loss += double(loss) / accum;
    }
    adamw_->set_lr(optimizer_spec_.lr_at(int(step), schedule_.steps));
    adamw_->step(program_->parameters(), grads);
    losses_.push_back(step_loss);
    done_now += 1;
    Footprint now;
    if (read_footprint(now)) {
      per_step.push_back({now.anon_bytes, now.file_bytes});
      check_budget(now, "after step " + std::to_string(step + 1));
    }
    bool stop = false;
    if (cfg_.progress && !cfg_.progress(int(step + 1), total_, step_loss)) cancel_.store(true);
    if (cancel_.load()) stop = true;
    const bool last = step + 1 == total_;
    const bool due = (step + 1) % cfg_.checkpoint_every == 0 || last;
    const bool stop_after = cfg_.stop_after > 0 && done_now >= cfg_.stop_after && !last;
    if (due || ((stop_after || stop) && !last)) checkpoint(step + 1);
    if ((stop || stop_after) && !last) {
      summary_ = interrupted(step + 1);
      return stop ? DITSKIP_CANCELLED : DITSKIP_OK;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json s = json::object();
  s["runtime"] = kRuntime;
  s["bundle"] = resolved(bundle_.root());
  s["steps"] = total_;
  s["resumed_from_step"] = start_;
  s["losses"] = losses_;
  s["final_loss"] = losses_.empty() ? json(nullptr) : json(losses_.back());
  int64_t trainable = 0;
  for (int64_t n : program_->numels()) trainable += n;
  s["trainable_params"] = trainable;
  s["cache_codec"] = bundle_.field({"subject_stage", "cache_codec"});
  s["seconds_per_step"] = py_round4(seconds / std::max(done_now, 1));
  s["program"] = entry_.path;
  s["backend"] = entry_.backend;
  s["precision"] = entry_.precision;
  if (have_footprint) {
    json fp = json::object();
    fp["what"] = kFootprintWhat;
    fp["at_start"] = at_start.to_json();
    fp["per_step_fields"] = {"anon_bytes", "file_bytes"};
    fp["per_step"] = per_step;
    int64_t peak = 0;
    for (const auto& row : per_step) peak = std::max(peak, row[0]);
    fp["peak_anon_above_start_bytes"] = peak - at_start.anon_bytes;
    s["footprint"] = fp;
  }
  std::vector<const float*> params(program_->parameters().begin(), program_->parameters().end());
  const std::string lora = write_lora(join_path(run_dir_, kLoraDir), bundle_, entry_, program_->names(),
                                      program_->shapes(), params);
  s["run_dir"] = resolved(run_dir_);
  s["lora"] = resolved(lora);
  json file = s;
  file["implementation"] = "native";
  PyDumps indent1;
  indent1.indent = 1;
  atomic_write(join_path(run_dir_, kSummaryFile), py_dumps(file, indent1));
  summary_ = with_run_fields(s);
  return DITSKIP_OK;
}

}  // namespace ditskip
