// ditskip-run generate BUNDLE --prompt P --out X.png [--seed N] [--steps N] [--guidance G] [--lora L]
//                     [--precision fp32|int8|int4] [--json]
// as `python -m ditskip_edge.runtime generate` (ditskip_edge/runtime/__main__.py _generate): --json prints the summary
// as one JSON document, otherwise "wrote X.png (WxH px, N steps, S s)"; a progress bar on stderr (DITSKIP_PROGRESS=0
// turns it off); a user mistake or a refused bundle is one line `ditskip-run generate: error: ...` and exit code 2;
// Ctrl-C stops after the current sampler step with no picture written (exit 1).
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "ditskip/ditskip.h"
#include "ditskip_run_common.h"

namespace {

struct StageBar {                      // progress.py Progress: "\r<label> [####      ] done/total rate/s"
  bool enabled = true;
  bool shown = false;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
};

volatile std::sig_atomic_t interrupted = 0;
void on_sigint(int) { interrupted = 1; }

bool on_stage(const char* stage, int32_t done, int32_t total, void* user_data) {
  StageBar& bar = *static_cast<StageBar*>(user_data);
  if (interrupted) return false;
  if (!bar.enabled || std::strcmp(stage, "generate") != 0) return true;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - bar.t0).count();
  const std::string hashes(size_t(30 * done / (total > 1 ? total : 1)), '#');
  std::fprintf(stderr, "\r%s [%-30s] %d/%d %.2f/s", stage, hashes.c_str(), done, total,
               done / (elapsed > 1e-9 ? elapsed : 1e-9));
  std::fflush(stderr);
  bar.shown = true;
  return true;
}

int refused(const std::string& message) {
  std::fprintf(stderr, "ditskip-run generate: error: %s\n", message.c_str());
  return 2;
}

}  // namespace

int generate_verb(int argc, char** argv) {
  const std::string verb = "generate";
  std::string bundle_dir, prompt, out, lora, precision, seed_text = "0";
  bool has_prompt = false, has_out = false, as_json = false;
  long long steps = -1, seed = 0;
  bool has_steps = false, has_guidance = false;
  double guidance = std::nan("");
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--prompt" || a == "--out" || a == "--seed" || a == "--steps" || a == "--guidance" || a == "--lora" ||
        a == "--precision") {
      if (i + 1 >= argc) return usage_error(verb, "argument " + a + ": expected one argument");
      const char* v = argv[++i];
      if (a == "--prompt") {
        prompt = v;
        has_prompt = true;
      } else if (a == "--out") {
        out = v;
        has_out = true;
      } else if (a == "--lora") {
        lora = v;
      } else if (a == "--precision") {
        if (std::strcmp(v, "fp32") != 0 && std::strcmp(v, "int8") != 0 && std::strcmp(v, "int4") != 0)
          return usage_error(verb, std::string("argument --precision: invalid choice: '") + v +
                                       "' (choose from 'fp32', 'int8', 'int4')");
        precision = v;
      } else if (a == "--guidance") {
        char* end = nullptr;
        guidance = std::strtod(v, &end);
        has_guidance = true;
        if (end == v || *end != '\0') return usage_error(verb, std::string("argument --guidance: invalid float value: '") + v + "'");
      } else {
        long long n = 0;
        if (!parse_int(v, n)) return usage_error(verb, "argument " + a + ": invalid int value: '" + v + "'");
        if (a == "--steps") {
          steps = n;
          has_steps = true;
        } else {
          seed = n;
          seed_text = v;
        }
      }
    } else if (int rc = common_arg(a, bundle_dir, as_json); rc >= 0) {
      return rc;
    }
  }
  if (bundle_dir.empty() || !has_prompt || !has_out) {
    std::string missing;
    if (bundle_dir.empty()) missing += "bundle";
    if (!has_prompt) missing += std::string(missing.empty() ? "" : ", ") + "--prompt";
    if (!has_out) missing += std::string(missing.empty() ? "" : ", ") + "--out";
    return usage_error(verb, "the following arguments are required: " + missing);
  }
  // what the C parameters cannot carry (-1 steps and NaN guidance mean the bundle's default; the seed is unsigned):
  // refused here with the core's message
  if (has_steps && (steps == -1 || steps < INT32_MIN || steps > INT32_MAX))
    return refused("--steps " + std::to_string(steps) + ": expected an integer from 1 to 1000");
  if (has_guidance && std::isnan(guidance)) return refused("--guidance nan: expected a number in [0, 100]");
  if (seed < 0) return refused("--seed " + std::to_string(seed) + ": expected 0 <= seed < 2^63");
  if (seed == LLONG_MAX && seed_text.find_first_not_of('0', seed_text[0] == '+') != std::string::npos &&
      seed_text.substr(seed_text.find_first_not_of('0', seed_text[0] == '+')) != "9223372036854775807")   // > int64
    return refused("--seed " + seed_text.substr(seed_text.find_first_not_of('0', seed_text[0] == '+')) +
                   ": expected 0 <= seed < 2^63");

  StageBar bar;
  const char* env = std::getenv("DITSKIP_PROGRESS");
  bar.enabled = env == nullptr || std::strcmp(env, "0") != 0;
  ditskip_generate_params params = ditskip_generate_default_params();
  params.prompt = prompt.c_str();
  params.seed = uint64_t(seed);
  if (has_steps) params.steps = int32_t(steps);
  params.guidance = guidance;
  params.lora = lora.empty() ? nullptr : lora.c_str();
  params.precision = precision.empty() ? nullptr : precision.c_str();
  params.out_png = out.c_str();
  params.progress = on_stage;
  params.progress_user_data = &bar;
  std::signal(SIGINT, on_sigint);
  char* summary = nullptr;
  const ditskip_status status = ditskip_generate(bundle_dir.c_str(), &params, &summary);
  std::signal(SIGINT, SIG_DFL);
  if (bar.shown) std::fputc('\n', stderr);
  if (status != DITSKIP_OK) {
    std::fprintf(stderr, "ditskip-run generate: %s: %s\n", status == DITSKIP_CANCELLED ? "stopped" : "error",
                 ditskip_last_error());
    return int(status);
  }
  if (as_json) {
    std::fputs(summary, stdout);
    std::fputc('\n', stdout);
  } else {
    const nlohmann::json s = nlohmann::json::parse(summary);
    std::printf("wrote %s (%lldx%lld px, %lld steps, %.1f s)\n", s["out"].get<std::string>().c_str(),
                s["size_px"][1].get<long long>(), s["size_px"][0].get<long long>(), s["steps"].get<long long>(),
                s["seconds"].get<double>());
  }
  ditskip_string_free(summary);
  return 0;
}
