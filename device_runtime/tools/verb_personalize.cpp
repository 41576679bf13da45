// ditskip-run personalize: `python -m ditskip_edge.runtime personalize` (ditskip_edge/runtime/__main__.py) on the
// native core, through the C header alone:
//
//     ditskip-run personalize MODEL_BUNDLE --photos DIR [--out SUBJECT_BUNDLE] [--prompt P]
//                             [--cache-free | --x0-only] [--no-train] [--force] [--keep-blocks] [--no-resume]
//                             [--runtime executorch] [--precision fp32|int8|int4] [--run-dir D] [--steps N]
//                             [--checkpoint-every N] [--json]
//
// The subject stage (ditskip_personalize), then, unless --no-train, training of the subject bundle it wrote as
// `ditskip-run train` does (run dir default SUBJECT_BUNDLE/runs/executorch). --json prints {"subject_stage": ...,
// "train": ...} (indent 1) as the Python verb does, else one line. A user mistake or a refused input is one line
// `ditskip-run personalize: error: ...` and exit 2; Ctrl-C stops after the current cache entry with the journal
// kept (the same command continues it; exit 1). --stop-after N (tests) stops as if interrupted after N new entries.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "ditskip/ditskip.h"
#include "ditskip_run_common.h"

namespace {

const std::string kVerb = "personalize";
volatile std::sig_atomic_t interrupted = 0;
ditskip_trainer* volatile training = nullptr;

void on_sigint(int) {
  interrupted = 1;
  if (training != nullptr) ditskip_trainer_cancel(training);
}

struct StageBar {
  bool enabled = true, shown = false;
};

bool on_stage(const char* stage, int32_t done, int32_t total, void* user_data) {
  StageBar& bar = *static_cast<StageBar*>(user_data);
  if (bar.enabled) {
    std::string hashes(size_t(30 * done / (total > 1 ? total : 1)), '#');
    std::fprintf(stderr, "\r%s [%-30s] %d/%d", stage, hashes.c_str(), done, total);
    std::fflush(stderr);
    bar.shown = true;
  }
  return interrupted == 0;
}

int error_line(ditskip_status status, bool shown) {
  if (shown) std::fputc('\n', stderr);
  std::fprintf(stderr, "ditskip-run personalize: %s: %s\n", status == DITSKIP_CANCELLED ? "stopped" : "error",
               ditskip_last_error());
  return int(status);
}

}  // namespace

int personalize_verb(int argc, char** argv) {
  std::string model_dir, photos, out, prompt, run_dir, precision, mode = "stored";
  bool has_prompt = false, no_train = false, force = false, keep_blocks = false, resume = true, as_json = false;
  long long steps = -1, checkpoint_every = 50, stop_after = 0;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--photos" || a == "--out" || a == "--prompt" || a == "--runtime" || a == "--precision" ||
        a == "--run-dir" || a == "--steps" || a == "--checkpoint-every" || a == "--stop-after") {
      if (i + 1 >= argc) return usage_error(kVerb, "argument " + a + ": expected one argument");
      const char* v = argv[++i];
      long long n = 0;
      if (a == "--photos") photos = v;
      else if (a == "--out") out = v;
      else if (a == "--prompt") prompt = v, has_prompt = true;
      else if (a == "--run-dir") run_dir = v;
      else if (a == "--runtime") {
        if (std::strcmp(v, "executorch") != 0) {
          if (std::strcmp(v, "ort") == 0) {
            std::fprintf(stderr, "ditskip-run personalize: error: --runtime ort: the native core runs executorch "
                                 "programs only (python -m ditskip_edge.runtime personalize --runtime ort runs ONNX "
                                 "Runtime)\n");
            return 2;
          }
          return usage_error(kVerb, std::string("argument --runtime: invalid choice: '") + v +
                                        "' (choose from 'executorch', 'ort')");
        }
      } else if (a == "--precision") {
        if (std::strcmp(v, "fp32") != 0 && std::strcmp(v, "int8") != 0 && std::strcmp(v, "int4") != 0)
          return usage_error(kVerb, std::string("argument --precision: invalid choice: '") + v +
                                        "' (choose from 'fp32', 'int8', 'int4')");
        precision = v;
      } else if (!parse_int(v, n)) {
        return usage_error(kVerb, "argument " + a + ": invalid int value: '" + v + "'");
      } else if (a == "--steps") {
        steps = n;
      } else if (a == "--checkpoint-every") {
        checkpoint_every = n;
      } else {
        stop_after = n;
      }
    } else if (a == "--cache-free" || a == "--x0-only") {
      const std::string m = a == "--cache-free" ? "cache-free" : "x0-only";
      if (mode != "stored" && mode != m)
        return usage_error(kVerb, "argument " + a + ": not allowed with argument " +
                                      (a == "--cache-free" ? "--x0-only" : "--cache-free"));
      mode = m;
    } else if (a == "--no-train") {
      no_train = true;
    } else if (a == "--force") {
      force = true;
    } else if (a == "--keep-blocks") {
      keep_blocks = true;
    } else if (a == "--no-resume") {
      resume = false;
    } else if (int rc = common_arg(a, model_dir, as_json); rc >= 0) {
      return rc;
    }
  }
  if (model_dir.empty() || photos.empty()) {
    std::string missing = model_dir.empty() ? "bundle" : "";
    if (photos.empty()) missing += std::string(missing.empty() ? "" : ", ") + "--photos";
    return usage_error(kVerb, "the following arguments are required: " + missing);
  }
  if (checkpoint_every < 1) {
    std::fprintf(stderr, "ditskip-run personalize: error: --checkpoint-every %lld: expected >= 1\n", checkpoint_every);
    return 2;
  }
  if (out.empty()) {
    out = model_dir;
    while (out.size() > 1 && out.back() == '/') out.pop_back();
    out += "-subject";
  }

  StageBar bar;
  const char* env = std::getenv("DITSKIP_PROGRESS");
  bar.enabled = env == nullptr || std::strcmp(env, "0") != 0;
  ditskip_personalize_params sp = ditskip_personalize_default_params();
  sp.out_dir = out.c_str();
  sp.prompt = has_prompt ? prompt.c_str() : nullptr;
  sp.cache_mode = mode.c_str();
  sp.resume = resume;
  sp.overwrite = force;
  sp.keep_blocks = keep_blocks;
  sp.stop_after = int32_t(stop_after);
  sp.progress = on_stage;
  sp.progress_user_data = &bar;
  std::signal(SIGINT, on_sigint);
  char* stage_text = nullptr;
  ditskip_status status = ditskip_personalize(model_dir.c_str(), photos.c_str(), &sp, &stage_text);
  if (status != DITSKIP_OK) {
    ditskip_string_free(stage_text);
    std::signal(SIGINT, SIG_DFL);
    return error_line(status, bar.shown);
  }
  if (bar.shown) std::fputc('\n', stderr);
  nlohmann::ordered_json doc;
  doc["subject_stage"] = nlohmann::ordered_json::parse(stage_text);
  ditskip_string_free(stage_text);
  const nlohmann::ordered_json& stage = doc["subject_stage"];
  auto print = [&](const std::string& line) {
    if (as_json) std::printf("%s\n", doc.dump(1).c_str());
    else std::printf("%s\n", line.c_str());
    return 0;
  };
  if (stage.contains("interrupted_at_entry")) {
    std::signal(SIGINT, SIG_DFL);
    return print("stopped after cache entry " + stage["interrupted_at_entry"].dump() + "; the same command continues "
                 "from " + stage["work_dir"].get<std::string>());
  }
  if (no_train) {
    std::signal(SIGINT, SIG_DFL);
    return print("subject bundle " + out + " (" + stage["num_samples"].dump() + " samples, " +
                 stage["cache_mode"].get<std::string>() + ")");
  }
  // training, as ditskip-run train does
  const std::string runs = run_dir.empty() ? out + "/runs/executorch" : run_dir;
  ditskip_train_params tp = ditskip_train_default_params();
  tp.run_dir = runs.c_str();
  tp.precision = precision.empty() ? nullptr : precision.c_str();
  tp.steps = int32_t(steps);
  tp.checkpoint_every = int32_t(checkpoint_every);
  tp.resume = resume;
  ditskip_bundle* bundle = nullptr;
  status = ditskip_bundle_open(out.c_str(), true, &bundle);
  if (status != DITSKIP_OK) return error_line(status, false);
  ditskip_trainer* trainer = nullptr;
  status = ditskip_trainer_create(bundle, &tp, &trainer);
  if (status != DITSKIP_OK) {
    ditskip_bundle_free(bundle);
    std::signal(SIGINT, SIG_DFL);
    return error_line(status, false);
  }
  training = trainer;
  status = ditskip_trainer_run(trainer);
  training = nullptr;
  std::signal(SIGINT, SIG_DFL);
  int rc = 0;
  if (status != DITSKIP_OK) {
    rc = error_line(status, false);
  } else {
    char* text = ditskip_trainer_summary_json(trainer);
    doc["train"] = nlohmann::ordered_json::parse(text != nullptr ? text : "null");
    ditskip_string_free(text);
    const auto& s = doc["train"];
    if (s.contains("interrupted_at_step"))
      print("subject bundle " + out + "; training stopped after step " + s["interrupted_at_step"].dump());
    else {
      char loss[64];
      std::snprintf(loss, sizeof loss, "%.4f", s["final_loss"].get<double>());
      print("subject bundle " + out + "; trained " + s["steps"].dump() + " steps with " +
            s["runtime"].get<std::string>() + ": final loss " + loss + "; LoRA " + s["lora"].get<std::string>());
    }
  }
  ditskip_trainer_free(trainer);
  ditskip_bundle_free(bundle);
  return rc;
}
