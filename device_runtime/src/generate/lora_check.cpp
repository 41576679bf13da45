// generation.py check_lora (see lora_check.h).
#include "generate/lora_check.h"

#include <cmath>
#include <cstring>
#include <set>

#include "bundle/safetensors.h"
#include "util/failure.h"
#include "util/files.h"

namespace ditskip::generate {

const char* const kLoraStates[4] = {"weight", "w_codes", "w_scale", "w_packed"};

namespace {

float half_to_float(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
  float v = exp == 0 ? std::ldexp(float(frac), -24)
                     : exp == 31 ? (frac ? NAN : INFINITY) : std::ldexp(float(frac | 0x400), exp - 25);
  return sign ? -v : v;
}

std::string numpy_dtype(const std::string& st) {
  return st == "F32" ? "float32" : st == "F16" ? "float16" : st == "I8" ? "int8" : st == "U8" ? "uint8" : st;
}

std::string list_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t k = 0; k < shape.size(); ++k) out += (k ? ", " : "") + std::to_string(shape[k]);
  return out + "]";
}

std::string module_of(const std::string& key) {       // k.rsplit(".lora_", 1)[0].removeprefix("transformer.")
  const size_t at = key.rfind(".lora_");
  std::string m = at == std::string::npos ? key : key.substr(0, at);
  if (m.rfind("transformer.", 0) == 0) m = m.substr(12);
  return m;
}

}  // namespace

std::map<std::string, LoraMatrix> check_lora(const Bundle& bundle, const std::string& path, const MappedWeights& base) {
  const std::string shown = join_path(path, "");
  if (!is_file(path)) refuse("--lora " + shown + ": no such file");
  StTensors tensors;
  StMetadata meta;
  try {
    read_safetensors(path, tensors, meta);
  } catch (const Failure& e) {
    if (e.status() != DITSKIP_BAD_INPUT) throw;
    refuse("--lora " + shown + ": not a safetensors file (SafetensorError)");
  }
  const json& record = bundle.field({"lora_file"});
  std::set<std::string> want;
  for (const json& k : record.at("keys")) want.insert(k.get<std::string>());
  std::set<std::string> have;
  for (const auto& [k, t] : tensors) have.insert(k);
  if (have != want) {
    json extra = json::array(), missing = json::array();
    for (const std::string& k : have)
      if (!want.count(k) && extra.empty()) extra.push_back(k);
    for (const std::string& k : want)
      if (!have.count(k) && missing.empty()) missing.push_back(k);
    refuse("--lora " + shown + ": a LoRA for another model or plan: its keys are not this bundle's (" +
           std::to_string(have.size()) + " keys, " + std::to_string(want.size()) + " expected; e.g. unexpected " +
           py_repr(extra) + ", missing " + py_repr(missing) + ")");
  }
  json meta_json = json::object();
  for (const auto& [k, v] : meta) meta_json[k] = v;
  if (!py_equal(meta_json, record.at("metadata")))
    refuse("--lora " + shown + ": its metadata (rank, alpha, target modules) differs from this bundle's lora_file "
           "record: a LoRA for another plan");
  std::map<std::string, LoraMatrix> out;
  for (const auto& [k, t] : tensors) {
    if ((t.dtype != "F32" && t.dtype != "F16") || t.shape.size() != 2)
      refuse("--lora " + shown + ": tensor " + k + " is " + numpy_dtype(t.dtype) + " " + list_text(t.shape) +
             ", expected a float matrix");
    const std::string module = module_of(k);
    std::map<std::string, std::vector<int64_t>> own;
    for (const char* s : kLoraStates)
      if (base.contains(module + "." + s)) own[s] = base.shape(module + "." + s);
    if (own.empty()) refuse("--lora " + shown + ": " + module + " is not a linear of this model");
    const int64_t o = own.count("weight") ? own["weight"][0] : own.count("w_codes") ? own["w_codes"][0] : own["w_packed"][0];
    const int64_t i = own.count("weight") ? own["weight"][1] : own.count("w_codes") ? own["w_codes"][1] : 2 * own["w_packed"][1];
    const bool is_a = k.find(".lora_A.") != std::string::npos;
    if (!(is_a ? t.shape[1] == i : t.shape[0] == o))
      refuse("--lora " + shown + ": " + k + " has shape " + list_text(t.shape) + ", which does not fit the frozen weight [" +
             std::to_string(o) + ", " + std::to_string(i) + "]: a LoRA for another model");
    LoraMatrix m;
    m.rows = t.shape[0];
    m.cols = t.shape[1];
    m.values.resize(size_t(m.rows * m.cols));
    for (size_t e = 0; e < m.values.size(); ++e) {
      if (t.dtype == "F32") {
        std::memcpy(&m.values[e], t.bytes.data() + 4 * e, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, t.bytes.data() + 2 * e, 2);
        m.values[e] = half_to_float(h);
      }
    }
    out[k] = std::move(m);
  }
  return out;
}

}  // namespace ditskip::generate
