// The C boundary of generation (include/ditskip/ditskip.h ditskip_generate) over run/generator.h. The environment
// variable DITSKIP_DUMP_IMAGE=<path> also writes the picture's float32 [H, W, 3] values there, raw (tests compare the
// runtimes on the float image, not only on its 8-bit rounding).
#include <cmath>
#include <cstdlib>
#include <limits>

#include "c_api_internal.h"
#include "run/generator.h"

using ditskip::c_api::guarded;
using ditskip::c_api::indented;
using ditskip::c_api::owned_copy;

extern "C" {

ditskip_generate_params ditskip_generate_default_params(void) {
  ditskip_generate_params p{};
  p.steps = -1;
  p.guidance = std::numeric_limits<double>::quiet_NaN();
  return p;
}

void ditskip_generate_default_params_ref(ditskip_generate_params* params) {
  if (params != nullptr) *params = ditskip_generate_default_params();
}

ditskip_status ditskip_generate(const char* bundle_dir, const ditskip_generate_params* params, char** summary_json) {
  if (summary_json != nullptr) *summary_json = nullptr;
  return guarded([&]() -> ditskip_status {
    if (bundle_dir == nullptr || params == nullptr) ditskip::refuse("ditskip_generate: bundle_dir and params are required");
    if (params->prompt == nullptr) ditskip::refuse("--prompt is required");
    if (params->out_png == nullptr || params->out_png[0] == '\0') ditskip::refuse("--out is required: the PNG to write");
    ditskip::GenerateRequest req;
    req.prompt = params->prompt;
    req.seed = params->seed;
    req.steps = params->steps;                       // -1: the bundle's default; other values checked
    req.has_guidance = !std::isnan(params->guidance);
    req.guidance = params->guidance;
    req.lora = params->lora != nullptr ? params->lora : "";
    req.precision = params->precision != nullptr ? params->precision : "";
    req.out = params->out_png;
    if (const char* dump = std::getenv("DITSKIP_DUMP_IMAGE"); dump != nullptr) req.dump_image = dump;
    if (params->progress != nullptr) {
      const ditskip_stage_callback cb = params->progress;
      void* user = params->progress_user_data;
      req.progress = [cb, user](const char* stage, int32_t done, int32_t total) { return cb(stage, done, total, user); };
    }
    const ditskip::json summary = ditskip::generate_picture(bundle_dir, req);
    if (summary_json != nullptr) *summary_json = owned_copy(indented(summary));
    return DITSKIP_OK;
  });
}

}  // extern "C"
