// The trained LoRA as diffusers' load_lora_weights reads it (ditskip_edge/runtime/safetensors_io.py write_lora): the
// program's parameters under the LoRA file keys (entry.trainable), with the manifest's lora_file record (name, keys,
// metadata). Returns the file's path: OUT_DIR/<lora_file.name>.
#pragma once

#include <string>
#include <vector>

#include "bundle/bundle.h"

namespace ditskip {

std::string write_lora(const std::string& out_dir, const Bundle& bundle, const ProgramEntry& entry,
                       const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
                       const std::vector<const float*>& params);

}  // namespace ditskip
