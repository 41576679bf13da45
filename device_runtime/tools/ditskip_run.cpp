// ditskip-run: the native device runtime from the command line, through the C header alone (what an app binds).
//
//     ditskip-run train BUNDLE [--runtime executorch] [--precision fp32|int8|int4] [--run-dir D] [--steps N]
//                       [--checkpoint-every N] [--no-resume] [--device-preprocess] [--budget-mib N] [--json]
//     ditskip-run --version
//
// Behaves as `python -m ditskip_edge.runtime train` (ditskip_edge/runtime/__main__.py): --json prints the summary
// as one JSON document on stdout, otherwise one line; a progress bar on stderr (DITSKIP_PROGRESS=0 turns it off); a
// user mistake or a refused bundle is one line `ditskip-run train: error: ...` on stderr and exit code 2; over the
// footprint budget exit 3; Ctrl-C stops after the current step with the steps done checkpointed (exit 1).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ditskip/ditskip.h"

namespace {

const char kUsage[] =
    "usage: ditskip-run train BUNDLE [--runtime executorch] [--precision fp32|int8|int4] [--run-dir D] [--steps N] "
    "[--checkpoint-every N] [--no-resume] [--device-preprocess] [--budget-mib N] [--json]\n"
    "       ditskip-run --version\n";

int usage_error(const std::string& verb, const std::string& message) {
  std::fputs(kUsage, stderr);
  std::fprintf(stderr, "ditskip-run%s%s: error: %s\n", verb.empty() ? "" : " ", verb.c_str(), message.c_str());
  return 2;
}

// progress.py Progress: "\r<label> [####      ] done/total loss L rate/s" on stderr
struct Bar {
  bool enabled = true;
  bool shown = false;
  int first = -1;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
};

bool on_progress(int32_t step, int32_t total, double loss, void* user_data) {
  Bar& bar = *static_cast<Bar*>(user_data);
  if (bar.first < 0) bar.first = step - 1;
  if (!bar.enabled) return true;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - bar.t0).count();
  const double rate = (step - bar.first) / (elapsed > 1e-9 ? elapsed : 1e-9);
  std::string hashes(size_t(30 * step / (total > 1 ? total : 1)), '#');
  std::fprintf(stderr, "\rtrain (executorch) [%-30s] %d/%d loss %.4f %.2f/s", hashes.c_str(), step, total, loss, rate);
  std::fflush(stderr);
  bar.shown = true;
  return true;
}

ditskip_trainer* volatile running = nullptr;

void on_sigint(int) {
  if (running != nullptr) ditskip_trainer_cancel(running);
}

bool parse_int(const char* text, long long& out) {
  char* end = nullptr;
  out = std::strtoll(text, &end, 10);
  return end != text && *end == '\0';
}

int train(int argc, char** argv) {
  const std::string verb = "train";
  std::string bundle_dir, run_dir, precision;
  long long steps = 0, checkpoint_every = 50, stop_after = 0;
  double budget_mib = 0;
  bool resume = true, device_preprocess = false, as_json = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (a == "--runtime" || a == "--precision" || a == "--run-dir" || a == "--steps" || a == "--checkpoint-every" ||
        a == "--budget-mib" || a == "--stop-after") {
      const char* v = value(a.c_str());
      if (v == nullptr) return usage_error(verb, "argument " + a + ": expected one argument");
      long long n = 0;
      if (a == "--runtime") {
        if (std::strcmp(v, "executorch") != 0) {
          if (std::strcmp(v, "ort") == 0) {
            std::fprintf(stderr, "ditskip-run train: error: --runtime ort: the native core runs executorch programs "
                                 "only (python -m ditskip_edge.runtime train --runtime ort runs ONNX Runtime)\n");
            return 2;
          }
          return usage_error(verb, std::string("argument --runtime: invalid choice: '") + v +
                                       "' (choose from 'executorch', 'ort')");
        }
      } else if (a == "--precision") {
        if (std::strcmp(v, "fp32") != 0 && std::strcmp(v, "int8") != 0 && std::strcmp(v, "int4") != 0)
          return usage_error(verb, std::string("argument --precision: invalid choice: '") + v +
                                       "' (choose from 'fp32', 'int8', 'int4')");
        precision = v;
      } else if (a == "--run-dir") {
        run_dir = v;
      } else if (a == "--budget-mib") {
        char* end = nullptr;
        budget_mib = std::strtod(v, &end);
        if (end == v || *end != '\0' || !(budget_mib > 0))
          return usage_error(verb, std::string("argument --budget-mib: expected a positive number of MiB, got '") + v + "'");
      } else if (!parse_int(v, n)) {
        return usage_error(verb, "argument " + a + ": invalid int value: '" + v + "'");
      } else if (a == "--steps") {
        steps = n;
        if (steps < 1) {   // 0 would mean "all" to the C API: say what the Python runtime says
          std::fprintf(stderr, "ditskip-run train: error: --steps %lld: expected 1 or more\n", steps);
          return 2;
        }
      } else if (a == "--checkpoint-every") {
        checkpoint_every = n;
      } else {
        stop_after = n;
      }
    } else if (a == "--no-resume") {
      resume = false;
    } else if (a == "--device-preprocess") {
      device_preprocess = true;
    } else if (a == "--json") {
      as_json = true;
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      return usage_error("", "unrecognized arguments: " + a);
    } else if (bundle_dir.empty()) {
      bundle_dir = a;
    } else {
      return usage_error("", "unrecognized arguments: " + a);
    }
  }
  if (bundle_dir.empty()) return usage_error(verb, "the following arguments are required: bundle");
  if (checkpoint_every < 1) {
    std::fprintf(stderr, "ditskip-run train: error: --checkpoint-every %lld: expected >= 1\n", checkpoint_every);
    return 2;
  }

  Bar bar;
  const char* env = std::getenv("DITSKIP_PROGRESS");
  bar.enabled = env == nullptr || std::strcmp(env, "0") != 0;
  ditskip_train_params params = ditskip_train_default_params();
  params.run_dir = run_dir.empty() ? nullptr : run_dir.c_str();
  params.precision = precision.empty() ? nullptr : precision.c_str();
  params.steps = int32_t(steps);
  params.checkpoint_every = int32_t(checkpoint_every);
  params.resume = resume;
  params.device_preprocess = device_preprocess;
  params.stop_after = int32_t(stop_after);
  params.budget_anon_bytes = int64_t(budget_mib * 1024.0 * 1024.0);
  params.progress = on_progress;
  params.progress_user_data = &bar;

  auto fail = [&](ditskip_status status) {
    if (bar.shown) std::fputc('\n', stderr);
    std::fprintf(stderr, "ditskip-run train: %s: %s\n", status == DITSKIP_CANCELLED ? "stopped" : "error",
                 ditskip_last_error());
    return int(status);
  };
  ditskip_bundle* bundle = nullptr;
  ditskip_status status = ditskip_bundle_open(bundle_dir.c_str(), true, &bundle);
  if (status != DITSKIP_OK) return fail(status);
  ditskip_trainer* trainer = nullptr;
  status = ditskip_trainer_create(bundle, &params, &trainer);
  if (status != DITSKIP_OK) {
    ditskip_bundle_free(bundle);
    return fail(status);
  }
  running = trainer;
  std::signal(SIGINT, on_sigint);
  bar.t0 = std::chrono::steady_clock::now();
  status = ditskip_trainer_run(trainer);
  std::signal(SIGINT, SIG_DFL);
  running = nullptr;
  int rc = 0;
  if (status != DITSKIP_OK) {
    rc = fail(status);
  } else {
    if (bar.shown) std::fputc('\n', stderr);
    char* text = ditskip_trainer_summary_json(trainer);
    if (text == nullptr) {
      rc = fail(DITSKIP_INTERNAL_ERROR);
    } else if (as_json) {
      std::fputs(text, stdout);
      std::fputc('\n', stdout);
    } else {
      const nlohmann::json s = nlohmann::json::parse(text);
      if (s.contains("interrupted_at_step"))
        std::printf("stopped after step %lld; checkpoint in %s\n", s["interrupted_at_step"].get<long long>(),
                    s["run_dir"].get<std::string>().c_str());
      else
        std::printf("trained %lld steps with %s: final loss %.4f; LoRA %s\n", s["steps"].get<long long>(),
                    s["runtime"].get<std::string>().c_str(), s["final_loss"].get<double>(),
                    s["lora"].get<std::string>().c_str());
    }
    ditskip_string_free(text);
  }
  ditskip_trainer_free(trainer);
  ditskip_bundle_free(bundle);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    std::fputs("ditskip-run: error: the following arguments are required: command\n", stderr);
    return 2;
  }
  const std::string verb = argv[1];
  if (verb == "--version") {
    std::printf("ditskip-run %s\n", ditskip_version());
    return 0;
  }
  if (verb == "-h" || verb == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (verb == "train") return train(argc - 2, argv + 2);
  if (verb == "personalize" || verb == "generate") {
    std::fprintf(stderr, "ditskip-run %s: error: not in the native core yet (a later issue moves it in); use "
                         "python -m ditskip_edge.runtime %s\n", verb.c_str(), verb.c_str());
    return 2;
  }
  return usage_error("", "argument command: invalid choice: '" + verb + "' (choose from 'train', 'personalize', "
                         "'generate')");
}
