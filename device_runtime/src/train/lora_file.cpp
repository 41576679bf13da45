#include "train/lora_file.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "bundle/safetensors.h"
#include "util/failure.h"
#include "util/files.h"

namespace ditskip {

std::string write_lora(const std::string& out_dir, const Bundle& bundle, const ProgramEntry& entry,
                       const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
                       const std::vector<const float*>& params) {
  const json& record = bundle.field({"lora_file"});
  StTensors tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    auto key = std::find_if(entry.trainable.begin(), entry.trainable.end(),
                            [&](const auto& kv) { return kv.first == names[i]; });
    if (key == entry.trainable.end()) refuse("manifest.json: program parameter " + names[i] + " has no LoRA file key");
    StTensor t;
    t.shape = shapes[i];
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    t.bytes.resize(size_t(n) * sizeof(float));
    if (n > 0) std::memcpy(t.bytes.data(), params[i], t.bytes.size());
    tensors[key->second] = std::move(t);
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
