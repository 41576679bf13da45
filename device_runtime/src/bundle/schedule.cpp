// The training schedule: ditskip_edge/runtime/schedule.py Schedule.load (checks and refusals) and Schedule.to_json
// (the value the cache identity hashes).
#include "bundle/schedule.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "util/failure.h"
#include "util/files.h"

namespace ditskip {
namespace {

constexpr int kAlgorithm = 2;
const char* const kSampleFields[] = {"index", "photo", "t", "crop_box", "noise_seed"};

// A Python exception as Schedule.load reports it: "<type>: <str(e)>".
struct PyError {
  std::string type, message;
};

[[noreturn]] void key_error(const std::string& key) { throw PyError{"KeyError", py_repr(json(key))}; }

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "NoneType";
    case json::value_t::boolean: return "bool";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "int";
    case json::value_t::number_float: return "float";
    case json::value_t::string: return "str";
    case json::value_t::array: return "list";
    case json::value_t::object: return "dict";
    default: return "object";
  }
}

const json& at(const json& d, const char* key) {
  const auto it = d.find(key);
  if (it == d.end()) key_error(key);
  return *it;
}

// Python's float(v) of a parsed JSON value.
json py_float(const json& v) {
  if (v.is_number_float()) return v;
  if (v.is_boolean()) return json(v.get<bool>() ? 1.0 : 0.0);
  if (v.is_number_unsigned()) return json(static_cast<double>(v.get<uint64_t>()));
  if (v.is_number_integer()) return json(static_cast<double>(v.get<int64_t>()));
  throw PyError{"TypeError", "float() argument must be a string or a real number, not '" + type_name(v) + "'"};
}

// Python's int(v) of a parsed JSON value (a float is truncated; it must fit 64 bits here).
json py_int(const json& v) {
  if (v.is_number_integer()) return v;   // signed and unsigned
  if (v.is_boolean()) return json(v.get<bool>() ? 1 : 0);
  if (v.is_number_float()) {
    const double d = std::trunc(v.get<double>());
    if (std::isnan(d)) throw PyError{"ValueError", "cannot convert float NaN to integer"};
    if (std::isinf(d)) throw PyError{"OverflowError", "cannot convert float infinity to integer"};
    if (d >= 0 && d < 18446744073709551616.0) return json(static_cast<uint64_t>(d));
    if (d < 0 && d >= -9223372036854775808.0) return json(static_cast<int64_t>(d));
    throw PyError{"OverflowError", "the integer is beyond 64 bits"};
  }
  throw PyError{"TypeError", "int() argument must be a string, a bytes-like object or a real number, not '" +
                                 type_name(v) + "'"};
}

// A field the C++ schedule needs as an integer in [lo, hi] (Python keeps whatever type the file holds).
int64_t need_int(const json& v, const std::string& what, int64_t lo, int64_t hi) {
  if (v.is_number_integer() && !v.is_boolean()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw PyError{"ValueError", what + " " + py_repr(v) + " is out of range"};
    const int64_t i = v.get<int64_t>();
    if (i >= lo && i <= hi) return i;
    throw PyError{"ValueError", what + " " + py_repr(v) + " is out of range"};
  }
  throw PyError{"TypeError", what + " must be an integer, got " + py_repr(v)};
}

// Schedule.from_json(d).to_json(): config completed with ScheduleConfig's defaults, t as float, crop_box a list,
// noise_seed and clamped_samples as int, algorithm and sample_fields the constants.
json canonical(const json& d) {
  const json& config_in = at(d, "config");
  if (!config_in.is_object())
    throw PyError{"TypeError", "ditskip_edge.runtime.schedule.ScheduleConfig() argument after ** must be a mapping, "
                               "not " + type_name(config_in)};
  json config = json::object();
  config["steps"] = 100;
  config["grad_accum"] = 1;
  config["s_min_px"] = 256;
  config["s_max_px"] = 512;
  config["multiple_px"] = 16;
  config["seed"] = 0;
  config["t_sampling"] = "uniform";
  config["dynamic_patches"] = true;
  for (auto it = config_in.begin(); it != config_in.end(); ++it) {
    if (config.find(it.key()) == config.end())
      throw PyError{"TypeError", "ScheduleConfig.__init__() got an unexpected keyword argument " + py_repr(json(it.key()))};
    config[it.key()] = it.value();
  }
  const json& names = at(d, "photo_names");
  if (!names.is_array()) throw PyError{"TypeError", "'" + type_name(names) + "' object is not iterable"};
  const json& samples_in = at(d, "samples");
  if (!samples_in.is_array()) throw PyError{"TypeError", "'" + type_name(samples_in) + "' object is not iterable"};
  json samples = json::array();
  for (const json& s : samples_in) {
    if (!s.is_array()) throw PyError{"TypeError", "cannot unpack non-iterable " + type_name(s) + " object"};
    if (s.size() < 5)
      throw PyError{"ValueError", "not enough values to unpack (expected 5, got " + std::to_string(s.size()) + ")"};
    if (s.size() > 5) throw PyError{"ValueError", "too many values to unpack (expected 5)"};
    if (!s[3].is_array()) throw PyError{"TypeError", "'" + type_name(s[3]) + "' object is not iterable"};
    samples.push_back(json::array({s[0], s[1], py_float(s[2]), s[3], py_int(s[4])}));
  }
  json out = json::object();
  out["algorithm"] = kAlgorithm;
  out["config"] = std::move(config);
  out["photo_names"] = names;
  const auto clamped = d.find("clamped_samples");
  out["clamped_samples"] = clamped == d.end() ? json(0) : py_int(*clamped);
  out["samples"] = std::move(samples);
  out["sample_fields"] = json::array();
  for (const char* f : kSampleFields) out["sample_fields"].push_back(f);
  return out;
}

void check_header(const json& d) {
  if (!d.is_object()) throw PyError{"AttributeError", "'" + type_name(d) + "' object has no attribute 'get'"};
  json fields = json::array();
  for (const char* f : kSampleFields) fields.push_back(f);
  const auto sf = d.find("sample_fields");
  if (sf == d.end() || !py_equal(*sf, fields)) key_error("sample_fields");
  const auto alg = d.find("algorithm");
  const json alg_value = alg == d.end() ? json(nullptr) : *alg;
  if (!py_equal(alg_value, json(kAlgorithm)))
    throw PyError{"KeyError", py_repr(json("algorithm " + py_repr(alg_value) + ", expected " +
                                           std::to_string(kAlgorithm) + ": recompile the bundle"))};
}

}  // namespace

json schedule_to_json(const json& parsed, const std::string& where) {
  try {
    check_header(parsed);
    return canonical(parsed);
  } catch (const PyError& e) {
    refuse(where + ": not a readable schedule (" + e.type + ": " + e.message + ")");
  }
}

Schedule load_schedule(const std::string& path) {
  Schedule s;
  if (!is_file(path)) {
    const bool folder = is_dir(path);
    refuse(path + ": not a readable schedule (" + (folder ? "IsADirectoryError: [Errno 21] Is a directory: "
                                                          : "FileNotFoundError: [Errno 2] No such file or directory: ") +
           py_repr(json(path)) + ")");
  }
  const std::string text = read_text(path);
  try {
    s.raw = json::parse(text);
  } catch (const json::exception& e) {
    refuse(path + ": not a readable schedule (JSONDecodeError: " + e.what() + ")");
  }
  int64_t steps = 0, grad_accum = 0;
  try {
    check_header(s.raw);
    const json c = canonical(s.raw);
    const json& config = c["config"];
    steps = need_int(config["steps"], "config.steps", INT32_MIN, INT32_MAX);
    grad_accum = need_int(config["grad_accum"], "config.grad_accum", INT32_MIN, INT32_MAX);
    for (const json& name : c["photo_names"]) {
      if (!name.is_string()) throw PyError{"TypeError", "photo_names holds " + py_repr(name) + ", expected strings"};
      s.photo_names.push_back(name.get<std::string>());
    }
    for (const json& row : c["samples"]) {
      Sample sample;
      sample.index = need_int(row[0], "sample index", INT64_MIN, INT64_MAX);
      sample.photo = static_cast<int>(need_int(row[1], "sample photo", 0, INT32_MAX));
      sample.t = row[2].get<double>();
      if (row[3].size() != 3) throw PyError{"ValueError", "crop_box " + py_repr(row[3]) + ": expected 3 integers"};
      for (int k = 0; k < 3; ++k) sample.crop_box[k] = need_int(row[3][k], "crop_box", INT64_MIN, INT64_MAX);
      if (row[4].is_number_unsigned()) sample.noise_seed = row[4].get<uint64_t>();
      else if (row[4].get<int64_t>() >= 0) sample.noise_seed = static_cast<uint64_t>(row[4].get<int64_t>());
      else throw PyError{"ValueError", "noise_seed " + py_repr(row[4]) + " is negative"};
      s.samples.push_back(sample);
    }
  } catch (const PyError& e) {
    refuse(path + ": not a readable schedule (" + e.type + ": " + e.message + ")");
  } catch (const json::exception& e) {   // a value of an unexpected type
    refuse(path + ": not a readable schedule (TypeError: " + e.what() + ")");
  }
  if (static_cast<int64_t>(s.samples.size()) != steps * grad_accum)
    refuse(path + ": " + std::to_string(s.samples.size()) + " samples for " + std::to_string(steps) + " steps x " +
           std::to_string(grad_accum));
  s.steps = static_cast<int>(steps);
  s.grad_accum = static_cast<int>(grad_accum);
  return s;
}

}  // namespace ditskip
