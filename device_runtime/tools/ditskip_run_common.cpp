#include "ditskip_run_common.h"

#include <cstdio>
#include <cstdlib>

const char kUsage[] =
    "usage: ditskip-run train BUNDLE [--runtime executorch] [--precision fp32|int8|int4] [--run-dir D] [--steps N] "
    "[--checkpoint-every N] [--no-resume] [--device-preprocess] [--budget-mib N] [--json]\n"
    "       ditskip-run step PROGRAM.pte [--data D.ptd] --inputs DIR [--steps N] [--method forward] [--json]\n"
    "       ditskip-run personalize MODEL_BUNDLE --photos DIR [--out SUBJECT_BUNDLE] [--prompt P] [--cache-free | "
    "--x0-only] [--no-train] [--force] [--keep-blocks] [train options] [--json]\n"
    "       ditskip-run generate BUNDLE --prompt P --out X.png [--seed N] [--steps N] [--guidance G] [--lora L] "
    "[--precision fp32|int8|int4] [--json]\n"
    "       ditskip-run footprint [--json]\n"
    "       ditskip-run --version\n"
    "train, step, personalize and generate also take --threads N (CPU threads; default: one per core)\n";

int usage_error(const std::string& verb, const std::string& message) {
  std::fputs(kUsage, stderr);
  std::fprintf(stderr, "ditskip-run%s%s: error: %s\n", verb.empty() ? "" : " ", verb.c_str(), message.c_str());
  return 2;
}

// What every verb parses alike: --json, --help, an unknown flag, and its one positional argument. Returns -1 when
// `a` was taken, else the exit code to return.
int common_arg(const std::string& a, std::string& positional, bool& as_json) {
  if (a == "--json") {
    as_json = true;
    return -1;
  }
  if (a == "-h" || a == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if ((!a.empty() && a[0] == '-') || !positional.empty()) return usage_error("", "unrecognized arguments: " + a);
  positional = a;
  return -1;
}

bool parse_int(const char* text, long long& out) {
  char* end = nullptr;
  out = std::strtoll(text, &end, 10);
  return end != text && *end == '\0';
}
