// A bundle as the device reads it: ditskip_edge/runtime/bundle.py's Bundle.open and its field access.
//
// open(): the manifest's first line `{"manifest_sha256": "<hex>",` must be the SHA-256 of every byte after it; format
// "ditskip-edge-bundle", format_version 3; then (verify_files) every listed file's size and SHA-256. Refusals are
// bundle.py's messages, one line each (tests/test_runtime.py compares them across runtimes).
#pragma once

#include <string>
#include <vector>

#include "util/json.h"

namespace ditskip {

struct OptimizerSpec {                 // bundle.py OptimizerSpec (manifest "optimizer")
  double lr = 1e-4, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-4;
  std::string lr_schedule = "constant";   // "constant" | "linear"
  double lr_at(int step, int steps) const { return lr_schedule == "constant" ? lr : lr * (1.0 - double(step) / steps); }
};

struct TensorSpec {                    // a program input/output: {name, shape, dtype}
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "float32";       // float32 | int8 | uint8
};

struct ProgramEntry {                  // contract.py ProgramEntry (the fields the device reads)
  std::string name, runtime, path, method = "forward", precision, backend, remat;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<std::pair<std::string, std::string>> trainable;          // program parameter name -> LoRA file key
  std::vector<std::pair<std::string, std::vector<int64_t>>> trainable_shapes;
  std::vector<std::string> data;       // bundle-relative .ptd (at most one for executorch)
  json raw;                            // the manifest's record as it is (block, kind, encode stage, ...)
};

class Bundle {
 public:
  static Bundle open(const std::string& dir, bool verify_files = true);

  const std::string& root() const { return root_; }
  const json& manifest() const { return manifest_; }          // without manifest_sha256
  const std::string& manifest_sha256() const { return digest_; }
  std::string path(const std::string& rel) const;              // root / rel

  // manifest[k0][k1]...; missing: refuse("<root>/manifest.json: missing field a.b") (bundle.py Bundle.field,
  // including its model-bundle message for subject_stage)
  const json& field(std::initializer_list<const char*> keys) const;
  std::string kind() const;                                    // "subject" | "model"
  std::string cache_mode() const;                              // "stored" | "x0-only" | "cache-free"
  std::string text_rows() const;                               // "shared" | "per_photo"
  OptimizerSpec optimizer() const;
  std::vector<ProgramEntry> programs() const;
  std::string file_sha256(const std::string& rel) const;       // from the manifest's files
  // contract.py find_program: first program with this name and runtime (and precision, if not empty)
  ProgramEntry find_program(const std::string& name, const std::string& runtime, const std::string& precision) const;
  // bundle.py verify_files: every listed file (or those in `only`) present, its size and SHA-256 the manifest's
  void verify_files(const std::vector<std::string>* only = nullptr) const;

 private:
  const json& programs_json() const;                           // manifest "programs" ([] if absent; a list)
  std::string root_, digest_;
  json manifest_;
};

// Python's cache_identity(model, plan, schedule): {"model", "transformer_config", "plan": [num_blocks, n_front,
// n_back], "schedule": Schedule.to_json()} (bundle.py). `schedule_json` is schedule.json as parsed (Schedule::raw):
// it is re-serialized as Schedule.from_json(...).to_json() does (schedule_to_json), so the digest is Python's.
json cache_identity(const Bundle& bundle, const json& schedule_json);
// cache_format.py identity_digest: SHA-256 of json.dumps(identity, sort_keys=True).
std::string identity_digest(const json& identity);

}  // namespace ditskip
