#include "train/checkpoint.h"

#include <cstring>
#include <stdexcept>

#include "bundle/safetensors.h"
#include "util/failure.h"
#include "util/json.h"
#include "util/sha256.h"

namespace ditskip {

const char kCheckpointFile[] = "checkpoint.safetensors";

std::string run_identity(const std::string& runtime, const std::string& program_sha256,
                         const std::string& manifest_sha256) {
  return sha256_hex("ditskip-edge checkpoint v1\n" + runtime + "\n" + program_sha256 + "\n" + manifest_sha256);
}

namespace {

StView f32_view(const std::vector<int64_t>& shape, const float* data) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return StView{"F32", shape, data, size_t(n) * sizeof(float)};
}

std::vector<float> floats_of(const StTensor& t, const std::string& key) {
  if (t.dtype != "F32") throw std::runtime_error("tensor " + key + " is " + t.dtype + ", expected F32");
  std::vector<float> out(t.bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), t.bytes.data(), out.size() * sizeof(float));
  return out;
}

int64_t parse_int(const StMetadata& meta, const std::string& key) {
  auto it = meta.find(key);
  if (it == meta.end()) throw std::out_of_range("'" + key + "'");
  size_t used = 0;
  const int64_t v = std::stoll(it->second, &used);
  if (used != it->second.size()) throw std::invalid_argument("invalid literal for int() with base 10: '" + it->second + "'");
  return v;
}

}  // namespace

void save_checkpoint(const std::string& path, int64_t step, const std::vector<double>& losses,
                     const std::string& identity, int64_t optimizer_steps, const std::vector<std::string>& names,
                     const std::vector<std::vector<int64_t>>& shapes, const std::vector<const float*>& params,
                     const std::vector<const float*>& m, const std::vector<const float*>& v) {
  StViews tensors;                     // views: the parameters and moments go from their buffers into the file
  for (size_t i = 0; i < names.size(); ++i) {
    tensors["param/" + names[i]] = f32_view(shapes[i], params[i]);
    tensors["m/" + names[i]] = f32_view(shapes[i], m[i]);
    tensors["v/" + names[i]] = f32_view(shapes[i], v[i]);
  }
  json list = json::array();
  for (double x : losses) list.push_back(x);
  StMetadata meta{{"step", std::to_string(step)},
                  {"losses", py_dumps(list)},
                  {"identity", identity},
                  {"optimizer_steps", std::to_string(optimizer_steps)}};
  write_safetensors(path, tensors, meta);
}

CheckpointState load_checkpoint(const std::string& path, const std::string& identity) {
  CheckpointState ck;
  try {
    StTensors tensors;
    StMetadata meta;
    read_safetensors(path, tensors, meta);
    auto id = meta.find("identity");
    if (id == meta.end()) throw std::out_of_range("'identity'");
    ck.identity = id->second;
    ck.step = parse_int(meta, "step");
    auto losses = meta.find("losses");
    if (losses == meta.end()) throw std::out_of_range("'losses'");
    for (const json& x : json::parse(losses->second)) ck.losses.push_back(x.get<double>());
    ck.optimizer_steps = parse_int(meta, "optimizer_steps");
    for (const auto& kv : tensors) {
      const std::string& key = kv.first;
      const size_t slash = key.find('/');
      const std::string kind = slash == std::string::npos ? "" : key.substr(0, slash);
      const std::string name = slash == std::string::npos ? key : key.substr(slash + 1);
      if (kind == "param") ck.params[name] = floats_of(kv.second, key);
      else if (kind == "m") ck.m[name] = floats_of(kv.second, key);
      else if (kind == "v") ck.v[name] = floats_of(kv.second, key);
      else continue;
      ck.shapes[name] = kv.second.shape;
    }
  } catch (const Failure& e) {
    refuse(path + ": unreadable checkpoint (" + e.what() + "); delete it or pass --no-resume");
  } catch (const std::out_of_range& e) {
    refuse(path + ": unreadable checkpoint (KeyError: " + e.what() + "); delete it or pass --no-resume");
  } catch (const std::exception& e) {
    refuse(path + ": unreadable checkpoint (ValueError: " + e.what() + "); delete it or pass --no-resume");
  }
  if (ck.identity != identity)
    refuse(path + ": checkpoint belongs to another bundle, program or schedule; delete it, pass --no-resume or use "
           "another --run-dir");
  return ck;
}

}  // namespace ditskip
