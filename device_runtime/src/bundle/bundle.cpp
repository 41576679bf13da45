// A bundle as the device reads it: ditskip_edge/runtime/bundle.py (read_manifest, parse_manifest, verify_files,
// Bundle's field access) and contract.py find_program, with the same refusals.
#include "bundle/bundle.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "bundle/schedule.h"
#include "util/failure.h"
#include "util/files.h"
#include "util/sha256.h"

namespace ditskip {
namespace {

const char* const kManifest = "manifest.json";
const char* const kFormat = "ditskip-edge-bundle";
constexpr int kFormatVersion = 3;
const char* const kDigestKey = "manifest_sha256";
const char* const kModelBundle = "model";
const char* const kSubjectBundle = "subject";

// `{"manifest_sha256": "<64 lowercase hex>",\n`: bundle.py's _DIGEST_LINE. Returns the digest, or "" if absent.
std::string digest_line(const std::string& raw) {
  static const std::string head = std::string("{\"") + kDigestKey + "\": \"";
  const size_t end = head.size() + 64 + 3;
  if (raw.size() < end || raw.compare(0, head.size(), head) != 0 || raw.compare(head.size() + 64, 3, "\",\n") != 0)
    return "";
  const std::string hex = raw.substr(head.size(), 64);
  for (char c : hex)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return "";
  return hex;
}

// Python's float(v) for the optimizer's fields; a failure throws the message OptimizerSpec.from_json's exception
// would carry.
struct Malformed {
  std::string message;
};

double py_float(const json& v) {
  if (v.is_number_float()) return v.get<double>();
  if (v.is_number_unsigned()) return static_cast<double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<double>(v.get<int64_t>());
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    const size_t a = s.find_first_not_of(" \t\n\r\f\v"), b = s.find_last_not_of(" \t\n\r\f\v");
    if (a != std::string::npos) {
      const std::string t = s.substr(a, b - a + 1);
      char* endp = nullptr;
      const double d = std::strtod(t.c_str(), &endp);
      if (endp == t.c_str() + t.size() && t.find_first_of("xXpP") == std::string::npos) return d;
    }
    throw Malformed{"could not convert string to float: " + py_repr(v)};
  }
  throw Malformed{"float() argument must be a string or a real number, not '" +
                  std::string(v.is_null() ? "NoneType" : v.is_array() ? "list" : "dict") + "'"};
}

const json& item(const json& d, const char* key) {
  if (!d.is_object()) throw Malformed{std::string(d.is_array() ? "list" : "value") + " indices must be integers or slices, not str"};
  const auto it = d.find(key);
  if (it == d.end()) throw Malformed{py_repr(json(key))};   // str(KeyError('lr')) == "'lr'"
  return *it;
}

std::string string_field(const json& p, const char* key, const std::string& fallback, const std::string& where,
                         bool required) {
  const auto it = p.find(key);
  if (it == p.end() || it->is_null()) {
    if (required) refuse(where + ": missing field " + key);
    return fallback;
  }
  if (!it->is_string()) refuse(where + ": field " + key + " is " + py_repr(*it) + ", expected a string");
  return it->get<std::string>();
}

std::vector<int64_t> shape_of(const json& v, const std::string& where) {
  if (!v.is_array()) refuse(where + " is " + py_repr(v) + ", expected a list of integers");
  std::vector<int64_t> out;
  for (const json& d : v) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX)))
      refuse(where + " is " + py_repr(v) + ", expected a list of integers");
    out.push_back(d.get<int64_t>());
  }
  return out;
}

std::vector<TensorSpec> tensor_specs(const json& p, const char* key, const std::string& where) {
  std::vector<TensorSpec> out;
  const auto it = p.find(key);
  if (it == p.end()) refuse(where + ": missing field " + key);
  if (!it->is_array()) refuse(where + ": field " + key + " must be a list");
  for (size_t k = 0; k < it->size(); ++k) {
    const json& s = (*it)[k];
    const std::string at = where + ": " + key + "[" + std::to_string(k) + "]";
    if (!s.is_object()) refuse(at + " is " + py_repr(s) + ", expected {name, shape, dtype}");
    TensorSpec spec;
    spec.name = string_field(s, "name", "", at, true);
    const auto shape = s.find("shape");
    if (shape == s.end()) refuse(at + ": missing field shape");
    spec.shape = shape_of(*shape, at + ".shape");
    spec.dtype = string_field(s, "dtype", "float32", at, false);
    out.push_back(std::move(spec));
  }
  return out;
}

ProgramEntry program_entry(const json& p, const std::string& where) {
  if (!p.is_object()) refuse(where + " is " + py_repr(p) + ", expected an object");
  ProgramEntry e;
  e.name = string_field(p, "name", "", where, true);
  e.runtime = string_field(p, "runtime", "", where, true);
  e.path = string_field(p, "path", "", where, true);
  e.method = string_field(p, "method", "forward", where, false);
  e.precision = string_field(p, "precision", "fp32", where, false);
  e.backend = string_field(p, "backend", "portable", where, false);
  e.remat = string_field(p, "remat", "none", where, false);
  e.inputs = tensor_specs(p, "inputs", where);
  e.outputs = tensor_specs(p, "outputs", where);
  if (const auto it = p.find("trainable"); it != p.end() && !it->is_null()) {
    if (!it->is_object()) refuse(where + ": field trainable must be an object");
    for (auto t = it->begin(); t != it->end(); ++t) {
      if (!t.value().is_string()) refuse(where + ": trainable." + t.key() + " must be a string");
      e.trainable.emplace_back(t.key(), t.value().get<std::string>());
    }
  }
  if (const auto it = p.find("trainable_shapes"); it != p.end() && !it->is_null()) {
    if (!it->is_object()) refuse(where + ": field trainable_shapes must be an object");
    for (auto t = it->begin(); t != it->end(); ++t)
      e.trainable_shapes.emplace_back(t.key(), shape_of(t.value(), where + ": trainable_shapes." + t.key()));
  }
  if (const auto it = p.find("data"); it != p.end() && !it->is_null()) {
    if (!it->is_array()) refuse(where + ": field data must be a list");
    for (const json& d : *it) {
      if (!d.is_string()) refuse(where + ": field data holds " + py_repr(d) + ", expected file names");
      e.data.push_back(d.get<std::string>());
    }
  }
  e.raw = p;
  return e;
}

}  // namespace

Bundle Bundle::open(const std::string& dir, bool verify_files) {
  Bundle b;
  b.root_ = join_path(dir, "");
  const std::string mpath = join_path(b.root_, kManifest);
  if (!is_dir(b.root_)) refuse("bundle " + b.root_ + " is not a folder");
  if (!is_file(mpath)) refuse(b.root_ + ": not a bundle (no " + kManifest + ")");

  // parse_manifest: the digest line, then the digest of every byte after it, then the JSON
  const std::string raw = read_text(mpath);
  const std::string digest = digest_line(raw);
  if (digest.empty())
    refuse(mpath + ": first line is not {\"" + kDigestKey + "\": \"<64 hex digits>\", (not a bundle manifest of format "
           "version " + std::to_string(kFormatVersion) + ", or edited)");
  const size_t body = 21 + 64 + 3;
  if (sha256_hex(raw.data() + body, raw.size() - body) != digest)
    refuse(mpath + ": contents do not match " + kDigestKey + " (the manifest was edited or is corrupt)");
  try {
    b.manifest_ = json::parse(raw);
  } catch (const json::exception& e) {
    refuse(mpath + ": not valid JSON (" + e.what() + ")");
  }
  if (!b.manifest_.is_object()) refuse(mpath + ": not valid JSON (not an object)");
  b.manifest_.erase(kDigestKey);
  b.digest_ = digest;

  const auto format = b.manifest_.find("format");
  const json format_value = format == b.manifest_.end() ? json(nullptr) : *format;
  if (!py_equal(format_value, json(kFormat)))
    refuse(mpath + ": format is " + py_repr(format_value) + ", expected " + py_repr(json(kFormat)));
  const auto version = b.manifest_.find("format_version");
  const json version_value = version == b.manifest_.end() ? json(nullptr) : *version;
  if (!py_equal(version_value, json(kFormatVersion)))
    refuse(mpath + ": format_version " + py_str(version_value) + " is not supported (this tool reads " +
           std::to_string(kFormatVersion) + ")");
  if (verify_files) b.verify_files();
  return b;
}

void Bundle::verify_files(const std::vector<std::string>* only) const {
  const auto files = manifest_.find("files");
  if (files == manifest_.end()) return;
  if (!files->is_object()) refuse(join_path(root_, kManifest) + ": field files must be an object");
  for (auto it = files->begin(); it != files->end(); ++it) {
    const std::string& rel = it.key();
    if (only != nullptr) {
      bool listed = false;
      for (const auto& o : *only) listed = listed || o == rel;
      if (!listed) continue;
    }
    const json& info = it.value();
    const std::string p = join_path(root_, rel);
    if (!is_file(p)) refuse(p + ": listed in the manifest but missing");
    const auto bytes = info.is_object() ? info.find("bytes") : info.end();
    const auto sha = info.is_object() ? info.find("sha256") : info.end();
    if (!info.is_object() || bytes == info.end() || sha == info.end())
      refuse(join_path(root_, kManifest) + ": files." + rel + " must hold sha256 and bytes");
    const int64_t size = file_size(p);
    if (!py_equal(json(size), *bytes)) refuse(p + ": " + std::to_string(size) + " bytes, manifest says " + py_str(*bytes));
    if (!sha->is_string() || sha256_file(p) != sha->get<std::string>())
      refuse(p + ": SHA-256 does not match the manifest (file changed or corrupt)");
  }
}

std::string Bundle::path(const std::string& rel) const { return join_path(root_, rel); }

const json& Bundle::field(std::initializer_list<const char*> keys) const {
  const json* node = &manifest_;
  std::string dotted;
  size_t i = 0;
  for (const char* key : keys) {
    dotted += (i == 0 ? "" : ".") + std::string(key);
    const bool found = node->is_object() && node->find(key) != node->end();
    if (!found) {
      if (i == 0 && std::strcmp(key, "subject_stage") == 0 && kind() == kModelBundle)
        refuse(root_ + ": a model bundle (no photos, no schedule, no cache): run the subject stage first: python -m "
               "ditskip_edge.runtime personalize " + root_ + " --photos DIR --out SUBJECT_BUNDLE");
      refuse(join_path(root_, kManifest) + ": missing field " + dotted);
    }
    node = &*node->find(key);
    ++i;
  }
  return *node;
}

std::string Bundle::kind() const {
  const auto it = manifest_.find("bundle_kind");
  const json kind = it == manifest_.end() ? json(kSubjectBundle) : *it;
  if (!kind.is_string() || (kind.get<std::string>() != kModelBundle && kind.get<std::string>() != kSubjectBundle))
    refuse(join_path(root_, kManifest) + ": bundle_kind " + py_repr(kind) + ", expected " + py_repr(json(kModelBundle)) +
           " or " + py_repr(json(kSubjectBundle)));
  return kind.get<std::string>();
}

namespace {
std::string one_of(const json& section, const char* key, const char* fallback, std::initializer_list<const char*> allowed,
                   const std::string& mpath, const char* section_name) {
  json value(fallback);
  if (section.is_object()) {
    const auto it = section.find(key);
    if (it != section.end()) value = *it;
  } else {
    refuse(mpath + ": field " + section_name + " must be an object");
  }
  std::string list;
  for (const char* a : allowed) {
    if (value.is_string() && value.get<std::string>() == a) return a;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  refuse(mpath + ": " + section_name + "." + key + " " + py_repr(value) + ", expected one of " + list);
}
}  // namespace

std::string Bundle::cache_mode() const {
  return one_of(field({"subject_stage"}), "cache_mode", "stored", {"stored", "x0-only", "cache-free"},
                join_path(root_, kManifest), "subject_stage");
}

std::string Bundle::text_rows() const {
  return one_of(field({"subject_stage"}), "text_rows", "shared", {"shared", "per_photo"}, join_path(root_, kManifest),
                "subject_stage");
}

OptimizerSpec Bundle::optimizer() const {
  const json& d = field({"optimizer"});
  OptimizerSpec o;
  try {
    o.lr = py_float(item(d, "lr"));
    const json& betas = item(d, "betas");
    if (!betas.is_array()) throw Malformed{"'" + std::string(betas.is_string() ? "str" : "int") + "' object is not subscriptable"};
    if (betas.size() < 2) throw Malformed{"list index out of range"};
    o.beta1 = py_float(betas[0]);
    o.beta2 = py_float(betas[1]);
    o.eps = py_float(item(d, "eps"));
    o.weight_decay = py_float(item(d, "weight_decay"));
    const auto sched = d.find("lr_schedule");
    o.lr_schedule = sched == d.end() ? "constant" : py_str(*sched);
    if (o.lr_schedule != "constant" && o.lr_schedule != "linear")
      throw Malformed{"lr_schedule " + py_repr(json(o.lr_schedule)) + ": expected one of constant, linear"};
  } catch (const Malformed& e) {
    refuse(join_path(root_, kManifest) + ": malformed field optimizer (" + e.message + ")");
  }
  return o;
}

const json& Bundle::programs_json() const {
  static const json empty = json::array();
  const auto it = manifest_.find("programs");
  if (it == manifest_.end()) return empty;
  if (!it->is_array()) refuse(join_path(root_, kManifest) + ": field programs must be a list");
  return *it;
}

std::vector<ProgramEntry> Bundle::programs() const {
  std::vector<ProgramEntry> out;
  const json& programs = programs_json();
  for (size_t k = 0; k < programs.size(); ++k)
    out.push_back(program_entry(programs[k], join_path(root_, kManifest) + ": programs[" + std::to_string(k) + "]"));
  return out;
}

std::string Bundle::file_sha256(const std::string& rel) const {
  const json& files = field({"files"});
  const auto it = files.is_object() ? files.find(rel) : files.end();
  if (!files.is_object() || it == files.end())
    refuse(join_path(root_, kManifest) + ": " + rel + " is not listed in files");
  const auto sha = it->is_object() ? it->find("sha256") : it->end();
  if (!it->is_object() || sha == it->end() || !sha->is_string())
    refuse(join_path(root_, kManifest) + ": files." + rel + " must hold sha256 and bytes");
  return sha->get<std::string>();
}

ProgramEntry Bundle::find_program(const std::string& name, const std::string& runtime,
                                  const std::string& precision) const {
  if (runtime != "executorch" && runtime != "ort")
    refuse("runtime " + py_repr(json(runtime)) + ": expected one of executorch, ort");
  if (!precision.empty() && precision != "fp32" && precision != "int8" && precision != "int4")
    refuse("precision " + py_repr(json(precision)) + ": expected one of fp32, int8, int4");
  const json& programs = programs_json();
  const auto get = [](const json& p, const char* key) {
    const auto it = p.find(key);
    return it == p.end() ? json(nullptr) : *it;
  };
  for (size_t k = 0; k < programs.size(); ++k) {
    const json& p = programs[k];
    if (!p.is_object()) continue;
    if (py_equal(get(p, "name"), json(name)) && py_equal(get(p, "runtime"), json(runtime)) &&
        (precision.empty() || py_equal(get(p, "precision"), json(precision))))
      return program_entry(p, join_path(root_, kManifest) + ": programs[" + std::to_string(k) + "]");
  }
  std::set<std::string> have;
  for (const json& p : programs)
    if (p.is_object() && py_equal(get(p, "name"), json(name)))
      have.insert(py_str(get(p, "runtime")) + "/" + py_str(get(p, "precision")));
  std::string listed;
  for (const auto& h : have) listed += (listed.empty() ? "" : ", ") + h;
  refuse(root_ + ": no " + runtime + " " + name + " program" + (precision.empty() ? "" : " at " + precision) +
         " (the bundle has: " + (listed.empty() ? "none" : listed) + "); compile with --runtime " + runtime +
         (precision.empty() ? "" : " --precision " + precision));
}

json cache_identity(const Bundle& bundle, const json& schedule_json) {
  std::string where = bundle.path("subject/schedule.json");
  const json& manifest = bundle.manifest();
  if (const auto stage = manifest.find("subject_stage"); stage != manifest.end() && stage->is_object())
    if (const auto s = stage->find("schedule"); s != stage->end() && s->is_string()) where = bundle.path(s->get<std::string>());
  json identity = json::object();
  identity["model"] = bundle.field({"model", "name"});
  identity["transformer_config"] = bundle.field({"model", "transformer_config"});
  identity["plan"] = json::array({bundle.field({"plan", "num_blocks"}), bundle.field({"plan", "n_front"}),
                                  bundle.field({"plan", "n_back"})});
  identity["schedule"] = schedule_to_json(schedule_json, where);
  return identity;
}

std::string identity_digest(const json& identity) {
  PyDumps how;
  how.sort_keys = true;
  return sha256_hex(py_dumps(identity, how));
}

}  // namespace ditskip
