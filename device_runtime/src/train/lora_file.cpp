#include "train/lora_file.h"

#include <algorithm>
#include <set>

#include "bundle/safetensors.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/shape.h"

namespace ditskip {

std::string write_lora(const std::string& out_dir, const Bundle& bundle, const ProgramEntry& entry,
                       const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
                       const std::vector<const float*>& params) {
  const json& record = bundle.field({"lora_file"});
  StViews tensors;                     // views of the parameters: the file is written without a copy of the LoRA
  for (size_t i = 0; i < names.size(); ++i) {
    auto key = std::find_if(entry.trainable.begin(), entry.trainable.end(),
                            [&](const auto& kv) { return kv.first == names[i]; });
    if (key == entry.trainable.end()) refuse("manifest.json: program parameter " + names[i] + " has no LoRA file key");
    StView t;
    t.shape = shapes[i];
    t.data = params[i];
    t.bytes = size_t(numel(shapes[i])) * sizeof(float);
    tensors[key->second] = t;
  }
  std::set<std::string> want;
  for (const json& k : record.at("keys")) want.insert(k.get<std::string>());
  std::set<std::string> have;
  for (const auto& kv : tensors) have.insert(kv.first);
  if (have != want) {
    std::string missing;
    int shown = 0;
    for (const std::string& k : want)
      if (!have.count(k) && shown < 3) missing += (shown++ ? ", '" : "'") + k + "'";
    refuse("manifest.json: the program's trainable parameters do not match lora_file.keys (e.g. missing [" + missing +
           "])");
  }
  StMetadata meta;
  for (const auto& kv : record.at("metadata").items())
    meta[kv.key()] = kv.value().is_string() ? kv.value().get<std::string>() : py_dumps(kv.value());
  const std::string path = join_path(out_dir, record.at("name").get<std::string>());
  make_dirs(out_dir);
  write_safetensors(path, tensors, meta);
  return path;
}

}  // namespace ditskip
