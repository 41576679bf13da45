// The C boundary (include/ditskip/ditskip.h) over the C++ core. Every entry point catches: ditskip::Failure gives its
// status and message, any other exception DITSKIP_INTERNAL_ERROR; the message is this thread's last error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include <executorch/runtime/platform/platform.h>

#include "bundle/bundle.h"
#include "run/threads.h"
#include "ditskip/ditskip.h"
#include "train/footprint.h"
#include "train/log.h"
#include "train/raw_program.h"
#include "train/trainer.h"
#include "util/failure.h"
#include "util/json.h"
#include "c_api_internal.h"

#ifndef DITSKIP_VERSION_STRING
#define DITSKIP_VERSION_STRING "0.0.0"
#endif

struct ditskip_bundle {
  ditskip::Bundle bundle;
};

struct ditskip_trainer {
  ditskip::Bundle* bundle = nullptr;
  std::unique_ptr<ditskip::Trainer> trainer;
};

struct ditskip_program {
  std::unique_ptr<ditskip::RawProgram> program;
};

namespace ditskip::c_api {
thread_local std::string last_error;
}  // namespace ditskip::c_api

using ditskip::c_api::guarded;
using ditskip::c_api::indented;
using ditskip::c_api::last_error;
using ditskip::c_api::owned_copy;

namespace {


std::mutex log_mutex;
ditskip_log_callback log_callback = nullptr;
void* log_user_data = nullptr;

// ExecuTorch's own log lines (its PAL) go to the same sink: errors as warnings; its info / debug lines (CPU
// detection, ...) only to a callback the app set, not to the default stderr sink.
void executorch_log(et_timestamp_t, et_pal_log_level_t level, const char* filename, const char*, size_t line,
                    const char* message, size_t length) {
  std::string text(message, length);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const bool severe = level == kError || level == kFatal;
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    if (!severe && log_callback == nullptr) return;
  }
  const char* base = std::strrchr(filename != nullptr ? filename : "", '/');
  ditskip::log_message(severe ? ditskip::kLogWarning : ditskip::kLogInfo,
                       std::string("executorch ") + (base != nullptr ? base + 1 : filename != nullptr ? filename : "") +
                           ":" + std::to_string(line) + ": " + text);
}

const bool executorch_log_registered =
    executorch::runtime::register_pal(executorch::runtime::PalImpl::create(executorch_log, __FILE__));

}  // namespace

namespace ditskip {

void log_message(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(log_mutex);
  if (log_callback != nullptr) {
    log_callback(int(level), message.c_str(), log_user_data);
  } else {
    std::fprintf(stderr, "ditskip: %s%s\n", level == kLogWarning ? "warning: " : "", message.c_str());
  }
}

}  // namespace ditskip

extern "C" {

const char* ditskip_last_error(void) { return last_error.c_str(); }

void ditskip_set_log_callback(ditskip_log_callback callback, void* user_data) {
  std::lock_guard<std::mutex> lock(log_mutex);
  log_callback = callback;
  log_user_data = user_data;
}

void ditskip_string_free(char* s) { std::free(s); }

const char* ditskip_version(void) { return DITSKIP_VERSION_STRING; }

ditskip_status ditskip_set_threads(int32_t threads) {
  return guarded([&] {
    ditskip::set_cpu_threads(threads);
    return DITSKIP_OK;
  });
}

int32_t ditskip_threads(void) {
  int32_t n = 1;
  guarded([&] {
    n = int32_t(ditskip::cpu_threads());
    return DITSKIP_OK;
  });
  return n;
}

ditskip_status ditskip_bundle_open(const char* bundle_dir, bool verify_files, ditskip_bundle** out) {
  return guarded([&] {
    if (out == nullptr) ditskip::refuse("ditskip_bundle_open: out is NULL");
    *out = nullptr;
    if (bundle_dir == nullptr) ditskip::refuse("ditskip_bundle_open: bundle_dir is NULL");
    *out = new ditskip_bundle{ditskip::Bundle::open(bundle_dir, verify_files)};
    return DITSKIP_OK;
  });
}

void ditskip_bundle_free(ditskip_bundle* bundle) { delete bundle; }

char* ditskip_bundle_manifest_json(const ditskip_bundle* bundle) {
  char* out = nullptr;
  guarded([&] {
    if (bundle == nullptr) ditskip::refuse("ditskip_bundle_manifest_json: bundle is NULL");
    out = owned_copy(indented(bundle->bundle.manifest()));
    return DITSKIP_OK;
  });
  return out;
}

ditskip_train_params ditskip_train_default_params(void) {
  ditskip_train_params p;
  p.run_dir = nullptr;
  p.precision = nullptr;
  p.steps = -1;
  p.checkpoint_every = 50;
  p.resume = true;
  p.device_preprocess = false;
  p.stop_after = 0;
  p.budget_anon_bytes = 0;
  p.progress = nullptr;
  p.progress_user_data = nullptr;
  return p;
}

void ditskip_train_default_params_ref(ditskip_train_params* params) {
  if (params != nullptr) *params = ditskip_train_default_params();
}

ditskip_status ditskip_trainer_create(ditskip_bundle* bundle, const ditskip_train_params* params,
                                      ditskip_trainer** out) {
  return guarded([&] {
    if (out == nullptr) ditskip::refuse("ditskip_trainer_create: out is NULL");
    *out = nullptr;
    if (bundle == nullptr) ditskip::refuse("ditskip_trainer_create: bundle is NULL");
    const ditskip_train_params p = params != nullptr ? *params : ditskip_train_default_params();
    if (p.stop_after < 0) ditskip::refuse("stop_after " + std::to_string(p.stop_after) + ": expected >= 0");
    if (p.budget_anon_bytes < 0) ditskip::refuse("budget " + std::to_string(p.budget_anon_bytes) + ": expected >= 0");
    ditskip::TrainConfig cfg;
    cfg.run_dir = p.run_dir != nullptr ? p.run_dir : "";
    cfg.precision = p.precision != nullptr ? p.precision : "";
    cfg.steps = p.steps;
    cfg.checkpoint_every = p.checkpoint_every;
    cfg.resume = p.resume;
    cfg.device_preprocess = p.device_preprocess;
    cfg.stop_after = p.stop_after;
    cfg.budget_anon_bytes = p.budget_anon_bytes;
    if (p.progress != nullptr) {
      ditskip_progress_callback cb = p.progress;
      void* user = p.progress_user_data;
      cfg.progress = [cb, user](int step, int total, double loss) { return cb(step, total, loss, user); };
    }
    auto handle = std::make_unique<ditskip_trainer>();
    handle->bundle = &bundle->bundle;
    handle->trainer = std::make_unique<ditskip::Trainer>(bundle->bundle, std::move(cfg));
    *out = handle.release();
    return DITSKIP_OK;
  });
}

ditskip_status ditskip_trainer_run(ditskip_trainer* trainer) {
  return guarded([&] {
    if (trainer == nullptr) ditskip::refuse("ditskip_trainer_run: trainer is NULL");
    const ditskip_status status = trainer->trainer->run();
    if (status == DITSKIP_CANCELLED) {
      const ditskip::json& s = trainer->trainer->summary();
      last_error = "cancelled: the checkpoint holds the first " + s.value("interrupted_at_step", ditskip::json(0)).dump() +
                   " steps (" + s.value("run_dir", std::string()) + ")";
    }
    return status;
  });
}

char* ditskip_trainer_summary_json(const ditskip_trainer* trainer) {
  char* out = nullptr;
  guarded([&] {
    if (trainer == nullptr) ditskip::refuse("ditskip_trainer_summary_json: trainer is NULL");
    const ditskip::json& s = trainer->trainer->summary();
    if (s.is_null()) ditskip::refuse("ditskip_trainer_summary_json: the trainer has not run");
    out = owned_copy(indented(s));
    return DITSKIP_OK;
  });
  return out;
}

void ditskip_trainer_cancel(ditskip_trainer* trainer) {
  if (trainer != nullptr && trainer->trainer) trainer->trainer->cancel();
}

void ditskip_trainer_free(ditskip_trainer* trainer) { delete trainer; }

ditskip_status ditskip_program_open(const char* pte_path, const char* ptd_path, ditskip_program** out) {
  return guarded([&] {
    if (out == nullptr) ditskip::refuse("ditskip_program_open: out is NULL");
    *out = nullptr;
    if (pte_path == nullptr) ditskip::refuse("ditskip_program_open: pte_path is NULL");
    auto handle = std::make_unique<ditskip_program>();
    handle->program = std::make_unique<ditskip::RawProgram>(pte_path, ptd_path != nullptr ? ptd_path : "");
    *out = handle.release();
    return DITSKIP_OK;
  });
}

ditskip_status ditskip_program_load_method(ditskip_program* program, const char* method) {
  return guarded([&] {
    if (program == nullptr) ditskip::refuse("ditskip_program_load_method: program is NULL");
    program->program->load_method(method != nullptr ? method : "forward");
    return DITSKIP_OK;
  });
}

ditskip_status ditskip_program_run(ditskip_program* program, const char* method, const ditskip_tensor* inputs,
                                   int32_t n_inputs, double* first_output) {
  return guarded([&] {
    if (program == nullptr) ditskip::refuse("ditskip_program_run: program is NULL");
    const double first = program->program->run(method != nullptr ? method : "forward", inputs, n_inputs);
    if (first_output != nullptr) *first_output = first;
    return DITSKIP_OK;
  });
}

void ditskip_program_free(ditskip_program* program) { delete program; }

void ditskip_footprint(int64_t* rss_anon_bytes, int64_t* rss_file_bytes) {
  ditskip::Footprint fp;
  const bool ok = ditskip::read_footprint(fp);
  if (rss_anon_bytes != nullptr) *rss_anon_bytes = ok ? fp.anon_bytes : -1;
  if (rss_file_bytes != nullptr) *rss_file_bytes = ok ? fp.file_bytes : -1;
}

}  // extern "C"
