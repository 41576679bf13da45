// The training checkpoint (ditskip_edge/runtime/checkpoint.py), RUN/checkpoint.safetensors, written atomically and
// byte-identical to the Python runtime's for the same state:
//
//     tensors   param/<name>, m/<name>, v/<name>      float32 (the program's parameter names)
//     metadata  step, losses (json.dumps of the list), identity, optimizer_steps
//
// identity = sha256 hex of "ditskip-edge checkpoint v1\n" + runtime + "\n" + program_sha256 + "\n" + manifest_sha256.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ditskip {

extern const char kCheckpointFile[];    // "checkpoint.safetensors"

std::string run_identity(const std::string& runtime, const std::string& program_sha256,
                         const std::string& manifest_sha256);

struct CheckpointState {
  int64_t step = 0;
  std::vector<double> losses;
  std::string identity;
  int64_t optimizer_steps = 0;
  // by parameter name: shape and values
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::vector<float>> params, m, v;
};

// names/shapes/params/m/v: the program's parameters in its order (pointers: numels[i] floats)
void save_checkpoint(const std::string& path, int64_t step, const std::vector<double>& losses,
                     const std::string& identity, int64_t optimizer_steps, const std::vector<std::string>& names,
                     const std::vector<std::vector<int64_t>>& shapes, const std::vector<const float*>& params,
                     const std::vector<const float*>& m, const std::vector<const float*>& v);

// checkpoint.py Checkpoint.load: an unreadable file, or another identity, refused with its messages
CheckpointState load_checkpoint(const std::string& path, const std::string& identity);

}  // namespace ditskip
