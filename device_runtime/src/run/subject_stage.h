// The subject stage on the device (ditskip_edge/runtime/subject.py personalize / _write_subject_bundle /
// write_cache): a model bundle and a folder of photos -> a subject bundle, resumable entry by entry. Refusals are
// subject.py's one-line messages, made before any work; the summary has personalize()'s fields (timings differ).
#pragma once

#include <string>

#include "ditskip/ditskip.h"
#include "util/json.h"

namespace ditskip {

struct SubjectConfig {
  std::string out_dir;                  // "" : MODEL_BUNDLE-subject beside the model bundle
  std::string cache_mode = "stored";    // stored | x0-only | cache-free
  std::string prompt;                   // "" with has_prompt false: the bundle's first
  bool has_prompt = false;
  bool resume = true, overwrite = false, keep_blocks = false;
  int stop_after = 0;                   // 0: never
  ditskip_stage_callback progress = nullptr;
  void* progress_user_data = nullptr;
};

// Returns the summary; `cancelled` set when the progress callback asked to stop (the working folder stays).
json personalize(const std::string& model_dir, const std::string& photos_dir, const SubjectConfig& cfg,
                 bool& cancelled);

}  // namespace ditskip
