// Generation on the device (ditskip_edge/runtime/generation.py generate / Generator / check_request): a prompt -> a
// picture with the bundle's generation programs and, if given, the trained LoRA merged at the weights' bit width.
//
//   check the generation part (format, precisions, text kind, programs present), verify the files generation reads,
//   check the request (prompt, steps, guidance, seed, --out) and the LoRA                       -- before any work
//   cond / uncond = encode(prompt / "")     hash text | WordPiece + text_encoder | each encoder's tokenizer.json + program
//   x = rng.normal(seed, latent_shape); for each sampler step: embed, each block (weights `w.<state>` handed in place
//   from the mapped merged file, else the base file), head, per branch; guided Euler step
//   decode per tile with the decoder's weights; clip(image * 0.5 + 0.5, 0, 1) -> PNG (temporary name, renamed)
//
// One program is loaded at a time (each holds its own planned arena). Refusals are generation.py's messages.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "util/json.h"

namespace ditskip {

struct GenerateRequest {
  std::string prompt;
  uint64_t seed = 0;
  int64_t steps = -1;                  // -1: the bundle's default
  bool has_guidance = false;           // false: the bundle's default
  double guidance = 0.0;
  std::string lora;                    // "" : the base model; a LoRA file or its folder
  std::string precision;               // "" : the bundle's first generation precision
  std::string out;                     // the PNG to write ("" : none, the summary only)
  std::string dump_image;              // raw float32 [H, W, 3] of the picture here too ("" : none; tests)
  // stage ("generate" per sampler step, "decode" per tile), done, total; false cancels (DITSKIP_CANCELLED)
  std::function<bool(const char*, int32_t, int32_t)> progress;
};

// Everything checked, sampled, the PNG written; returns the summary `python -m ditskip_edge.runtime generate --json`
// prints (its fields in its order).
json generate_picture(const std::string& bundle_dir, const GenerateRequest& request);

}  // namespace ditskip
