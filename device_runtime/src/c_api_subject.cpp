// The C boundary of the subject stage (include/ditskip/ditskip.h ditskip_personalize): run/subject_stage.h.
#include "c_api_internal.h"
#include "run/subject_stage.h"

using ditskip::c_api::guarded;

extern "C" {

ditskip_personalize_params ditskip_personalize_default_params(void) {
  ditskip_personalize_params p{};
  p.resume = true;
  return p;
}

void ditskip_personalize_default_params_ref(ditskip_personalize_params* params) {
  if (params != nullptr) *params = ditskip_personalize_default_params();
}

ditskip_status ditskip_personalize(const char* model_bundle_dir, const char* photos_dir,
                                   const ditskip_personalize_params* params, char** summary_json) {
  return guarded([&]() -> ditskip_status {
    if (summary_json != nullptr) *summary_json = nullptr;
    if (model_bundle_dir == nullptr || photos_dir == nullptr)
      ditskip::refuse("ditskip_personalize: model_bundle_dir and photos_dir are required");
    const ditskip_personalize_params p = params != nullptr ? *params : ditskip_personalize_default_params();
    ditskip::SubjectConfig cfg;
    if (p.out_dir != nullptr) cfg.out_dir = p.out_dir;
    if (p.prompt != nullptr) cfg.prompt = p.prompt, cfg.has_prompt = true;
    if (p.cache_mode != nullptr) cfg.cache_mode = p.cache_mode;
    cfg.resume = p.resume;
    cfg.overwrite = p.overwrite;
    cfg.keep_blocks = p.keep_blocks;
    cfg.stop_after = p.stop_after;
    cfg.progress = p.progress;
    cfg.progress_user_data = p.progress_user_data;
    bool cancelled = false;
    const ditskip::json summary = ditskip::personalize(model_bundle_dir, photos_dir, cfg, cancelled);
    if (summary_json != nullptr) *summary_json = ditskip::c_api::owned_copy(ditskip::c_api::indented(summary));
    if (cancelled) {
      ditskip::c_api::last_error = "stopped after cache entry " + std::to_string(summary["interrupted_at_entry"].get<long long>()) +
                                   "; the run continues from " + summary["work_dir"].get<std::string>() +
                                   " when started again";
      return DITSKIP_CANCELLED;
    }
    return DITSKIP_OK;
  });
}

}  // extern "C"
