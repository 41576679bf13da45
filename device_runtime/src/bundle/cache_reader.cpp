// The residual cache reader: ditskip_edge/runtime/cache.py CacheReader and cache_format.py entry_layout, with the
// same checks and refusals.
#include "bundle/cache_reader.h"

#include <cstring>

#include "bundle/bundle.h"
#include "util/failure.h"
#include "util/sha256.h"

namespace ditskip {
namespace {

const char* const kIndex = "cache_index.json";
const char* const kFormat = "ditskip-edge-residual-cache";
constexpr int kFormatVersion = 3;
constexpr int64_t kAlign = 64;

// A Python exception _check would raise: "<type>: <str(e)>" (turned into "malformed cache index (...)").
struct PyError {
  std::string type, message;
};

const json& at(const json& d, const std::string& key) {
  if (!d.is_object()) throw PyError{"TypeError", (d.is_array() ? "list" : "value") + std::string(" indices must be integers or slices, not str")};
  const auto it = d.find(key);
  if (it == d.end()) throw PyError{"KeyError", py_repr(json(key))};
  return *it;
}

int64_t as_int64(const json& v, const std::string& what) {
  if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
    return v.get<int64_t>();
  throw PyError{"TypeError", what + " " + py_repr(v) + " is not an integer"};
}

// cache_format.py TensorCodec
struct TensorCodec {
  std::string kind;              // fp32 | fp16 | int8 | int4 | lowrank
  std::string axis = "token";
  int64_t group = 0, rank = 0;
};

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// int(digits) clamped (a value above the limit only needs to compare as too large)
int64_t digits_value(const std::string& s) {
  int64_t v = 0;
  for (char c : s) {
    v = v * 10 + (c - '0');
    if (v > (int64_t(1) << 40)) return int64_t(1) << 40;
  }
  return v;
}

TensorCodec parse_tensor_codec(const std::string& spec) {
  const std::string s = trim(spec);
  if (s == "fp32" || s == "fp16") return {s};
  if (s == "int8-token" || s == "int8-channel") return {"int8", s.substr(5)};
  if ((s.rfind("int8-", 0) == 0 || s.rfind("int4-", 0) == 0) && s.size() > 6 && (s[5] == 'g' || s[5] == 't') &&
      all_digits(s.substr(6))) {
    const int64_t g = digits_value(s.substr(6));
    if (g < 2 || g % 2 || g > (1 << 20))
      refuse("cache codec " + py_repr(json(s)) + ": group size must be an even number in [2, " + std::to_string(1 << 20) + "]");
    return {s.substr(0, 4), s[5] == 'g' ? "token" : "channel", g};
  }
  if (s.rfind("lowrank-r", 0) == 0 && all_digits(s.substr(9))) {
    const int64_t r = digits_value(s.substr(9));
    if (r < 1 || r > 4096) refuse("cache codec " + py_repr(json(s)) + ": rank must be in [1, 4096]");
    TensorCodec c{"lowrank"};
    c.rank = r;
    return c;
  }
  refuse("unknown cache codec " + py_repr(json(s)) + ": expected fp32, fp16, int8-token, int8-channel, int8-gG, "
         "int8-tG, int4-gG, int4-tG, lowrank-rR (or 'DEFAULT,name=CODEC,...')");
}

std::string tensor_codec_spec(const TensorCodec& c) {
  if (c.kind == "fp32" || c.kind == "fp16") return c.kind;
  if (c.kind == "int8" && c.group == 0) return "int8-" + c.axis;
  if (c.kind == "int8" || c.kind == "int4") return c.kind + "-" + (c.axis == "token" ? "g" : "t") + std::to_string(c.group);
  return "lowrank-r" + std::to_string(c.rank);
}

struct CacheCodec {
  TensorCodec default_codec;
  std::vector<std::pair<std::string, TensorCodec>> overrides;

  const TensorCodec& for_name(const std::string& name) const {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)   // dict(overrides): the last one wins
      if (it->first == name) return it->second;
    return default_codec;
  }
  std::string spec() const {
    std::string s = tensor_codec_spec(default_codec);
    for (const auto& [k, c] : overrides) s += "," + k + "=" + tensor_codec_spec(c);
    return s;
  }
};

CacheCodec parse_cache_codec(const std::string& spec) {
  std::vector<std::string> items;
  size_t i = 0;
  while (i <= spec.size()) {
    size_t j = spec.find(',', i);
    if (j == std::string::npos) j = spec.size();
    const std::string item = trim(spec.substr(i, j - i));
    if (!item.empty()) items.push_back(item);
    i = j + 1;
  }
  std::vector<std::string> defaults;
  for (const auto& s : items)
    if (s.find('=') == std::string::npos) defaults.push_back(s);
  if (defaults.size() != 1)
    refuse("cache codec " + py_repr(json(spec)) + ": give exactly one default codec, e.g. 'int8-channel' or "
           "'int8-channel,front.txt=lowrank-r8'");
  CacheCodec c;
  for (const auto& s : items)     // Python parses the overrides first, then the default
    if (s.find('=') != std::string::npos) {
      const size_t eq = s.find('=');
      c.overrides.emplace_back(trim(s.substr(0, eq)), parse_tensor_codec(s.substr(eq + 1)));
    }
  c.default_codec = parse_tensor_codec(defaults[0]);
  return c;
}

std::string shape_list(const std::vector<int64_t>& shape) {
  json j = json::array();
  for (int64_t d : shape) j.push_back(d);
  return py_repr(j);
}

// TensorCodec.group_shape: [B, N, D] as scale groups
std::vector<int64_t> group_shape(const TensorCodec& c, const std::vector<int64_t>& s) {
  const int64_t B = s[0], N = s[1], D = s[2];
  if (c.axis == "channel") {
    const int64_t g = c.group && N % c.group == 0 ? c.group : N;
    return {B, g ? N / g : 0, g, D};
  }
  const int64_t g = c.group && D % c.group == 0 ? c.group : D;
  return {B, N, g ? D / g : 0, g};
}

void tensor_parts(const TensorCodec& c, const std::string& name, const std::vector<int64_t>& s,
                  std::vector<CachePart>& out) {
  if (s.size() != 3) refuse("residual " + py_repr(json(name)) + ": expected [B, N, D], got shape " + shape_list(s));
  if (c.kind == "int4" && s[2] % 2)
    refuse("residual " + py_repr(json(name)) + ": int4 packs channel pairs, D = " + std::to_string(s[2]) + " is odd");
  const int64_t B = s[0], N = s[1], D = s[2];
  const auto add = [&](const std::string& part, const char* dtype, std::vector<int64_t> shape) {
    CachePart p;
    p.name = name + "." + part;
    p.dtype = dtype;
    p.shape = std::move(shape);
    out.push_back(std::move(p));
  };
  if (c.kind == "fp32") {
    add("values", "float32", {B, N, D});
  } else if (c.kind == "fp16") {
    add("values", "uint8", {B, N, 2 * D});
  } else if (c.kind == "int8" || c.kind == "int4") {
    const auto g = group_shape(c, s);
    const std::vector<int64_t> sshape = c.axis == "channel" ? std::vector<int64_t>{g[0], g[1], 1, g[3]}
                                                            : std::vector<int64_t>{g[0], g[1], g[2], 1};
    if (c.kind == "int8") add("codes", "int8", {B, N, D});
    else add("codes", "uint8", {B, N, D / 2});
    add("scale", "float32", sshape);
  } else {
    const int64_t r = std::min(c.rank, std::min(N, D));
    add("u.codes", "int8", {B, N, r});
    add("u.scale", "float32", {B, 1, r});
    add("v.codes", "int8", {B, r, D});
    add("v.scale", "float32", {B, r, 1});
  }
}

int64_t dtype_bytes(const std::string& dtype) { return dtype == "float32" ? 4 : 1; }

json layout_json(const std::vector<CachePart>& parts) {
  json j = json::object();
  for (const auto& p : parts) {
    json shape = json::array();
    for (int64_t d : p.shape) shape.push_back(d);
    j[p.name] = json{{"dtype", p.dtype}, {"shape", shape}, {"offset", p.offset}, {"bytes", p.bytes}};
  }
  return j;
}

}  // namespace

std::vector<CachePart> entry_layout(const std::string& codec_spec, const json& shapes, int64_t& entry_bytes) {
  const CacheCodec codec = parse_cache_codec(codec_spec);
  if (!shapes.is_object()) refuse("cache shapes " + py_repr(shapes) + ": expected {name: [dims]}");
  std::vector<CachePart> parts;
  for (auto it = shapes.begin(); it != shapes.end(); ++it) {
    std::vector<int64_t> shape;
    if (!it.value().is_array()) refuse("cache shapes: " + it.key() + " is " + py_repr(it.value()) + ", expected a list");
    for (const json& d : it.value()) {
      if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT32_MAX)) ||
          (!d.is_number_unsigned() && (d.get<int64_t>() < 0 || d.get<int64_t>() > INT32_MAX)))
        refuse("cache shapes: " + it.key() + " is " + py_repr(it.value()) + ", expected non-negative integers");
      shape.push_back(d.get<int64_t>());
    }
    if (it.key() == "x0") {
      CachePart p;
      p.name = "x0";
      p.dtype = "float32";
      p.shape = shape;
      parts.push_back(std::move(p));
    } else {
      tensor_parts(codec.for_name(it.key()), it.key(), shape, parts);
    }
  }
  // a later residual's parts replace an earlier one's of the same name (Python's dict.update), in the first's place
  std::vector<CachePart> unique;
  for (auto& p : parts) {
    bool replaced = false;
    for (auto& u : unique)
      if (u.name == p.name) u = p, replaced = true;
    if (!replaced) unique.push_back(p);
  }
  int64_t off = 0;
  for (auto& p : unique) {
    int64_t n = dtype_bytes(p.dtype);
    for (int64_t d : p.shape) {
      if (d != 0 && n > (int64_t(1) << 50) / d) refuse("cache part " + p.name + ": " + shape_list(p.shape) + " is too large");
      n *= d;
    }
    p.offset = off;
    p.bytes = n;
    off = (off + n + kAlign - 1) / kAlign * kAlign;
  }
  entry_bytes = off;
  return unique;
}

const uint8_t* CacheEntry::part(const std::string& name) const {
  if (parts == nullptr) return nullptr;
  for (const auto& p : *parts)
    if (p.name == name) return bytes.data() + p.offset;
  return nullptr;
}

CacheReader::CacheReader(const std::string& dir, const json* identity, int64_t expected_entries)
    : dir_(join_path(dir, "")) {
  const std::string ipath = join_path(dir_, kIndex);
  if (!is_file(ipath)) refuse(ipath + ": residual cache index missing");
  try {
    index_ = json::parse(read_text(ipath));
  } catch (const json::exception& e) {
    refuse(ipath + ": not valid JSON (" + e.what() + ")");
  }
  try {
    const json& idx = index_;
    if (!idx.is_object()) throw PyError{"AttributeError", "'list' object has no attribute 'get'"};
    const auto get = [&](const char* key) {
      const auto it = idx.find(key);
      return it == idx.end() ? json(nullptr) : *it;
    };
    if (!py_equal(get("format"), json(kFormat)) || !py_equal(get("format_version"), json(kFormatVersion)))
      refuse(ipath + ": format " + py_repr(get("format")) + " version " + py_str(get("format_version")) + ", expected " +
             py_repr(json(kFormat)) + " version " + std::to_string(kFormatVersion));
    const std::string index_digest = identity_digest(at(idx, "identity"));
    const json& stored_digest = at(idx, "identity_sha256");
    if (!py_equal(json(index_digest), stored_digest))
      refuse(ipath + ": field identity does not match identity_sha256 (index edited or corrupt)");
    if (identity != nullptr) {
      const std::string expected = identity_digest(*identity);
      if (!py_equal(stored_digest, json(expected)))
        refuse(ipath + ": cache was made for another model, plan or schedule (identity_sha256 " +
               py_str(stored_digest).substr(0, 12) + ".., expected " + expected.substr(0, 12) + "..)");
    }
    const json& codec = at(idx, "codec");
    std::string spec;
    if (codec.is_object()) spec = py_str(at(codec, "spec"));
    else spec = py_str(codec);
    const std::string canonical_spec = parse_cache_codec(spec).spec();
    int64_t expect_bytes = 0;
    const std::vector<CachePart> expect = entry_layout(spec, at(idx, "shapes"), expect_bytes);
    const json& layout = at(idx, "layout");
    if (!py_equal(layout_json(expect), layout) || !py_equal(json(expect_bytes), at(idx, "entry_bytes")))
      refuse(ipath + ": field layout does not match codec " + canonical_spec + " and shapes");
    // the parts in the index's order (equal to ours as a dict)
    for (auto it = layout.begin(); it != layout.end(); ++it)
      for (const auto& p : expect)
        if (p.name == it.key()) parts_.push_back(p);

    const json& entries = at(idx, "entries");
    if (!entries.is_array()) throw PyError{"TypeError", "entries must be a list"};
    const int64_t n = static_cast<int64_t>(entries.size());
    const json& num_entries = at(idx, "num_entries");
    if (!py_equal(json(n), num_entries) || (expected_entries >= 0 && n != expected_entries))
      refuse(ipath + ": " + std::to_string(n) + " entries, expected " +
             (expected_entries > 0 ? std::to_string(expected_entries) : py_str(num_entries)));
    const json& shards = at(idx, "shards");
    if (!shards.is_object()) throw PyError{"AttributeError", "'" + std::string(shards.is_array() ? "list" : "value") + "' object has no attribute 'items'"};
    for (auto it = shards.begin(); it != shards.end(); ++it) {
      const std::string p = join_path(dir_, it.key());
      if (!is_file(p)) refuse(p + ": residual cache shard missing");
      const json& bytes = at(it.value(), "bytes");
      if (!py_equal(json(file_size(p)), bytes))
        refuse(p + ": " + std::to_string(file_size(p)) + " bytes, " + kIndex + " says " + py_str(bytes) +
               " (truncated or overwritten)");
    }
    for (const json& e : entries) {
      const json& shard = at(e, "shard");
      const bool known = shard.is_string() && shards.find(shard.get<std::string>()) != shards.end();
      bool outside = !known || !py_equal(at(e, "bytes"), at(idx, "entry_bytes"));
      if (!outside) {
        const int64_t offset = as_int64(at(e, "offset"), "offset"), bytes = as_int64(at(e, "bytes"), "bytes");
        const int64_t shard_bytes = as_int64(at(shards[shard.get<std::string>()], "bytes"), "bytes");
        // (a negative offset or size is refused here too: Python's slicing would wrap it)
        outside = offset < 0 || bytes < 0 || offset > shard_bytes || bytes > shard_bytes - offset;
      }
      if (outside) refuse(ipath + ": an entry points outside its shard (" + py_repr(e) + ")");
      if (!at(e, "sha256").is_string()) throw PyError{"TypeError", "sha256 " + py_repr(at(e, "sha256")) + " is not a string"};
    }
  } catch (const PyError& e) {
    refuse(ipath + ": malformed cache index (" + e.type + ": " + e.message + ")");
  } catch (const json::exception& e) {
    refuse(ipath + ": malformed cache index (TypeError: " + e.what() + ")");
  }
}

int64_t CacheReader::size() const { return static_cast<int64_t>(index_["entries"].size()); }

CacheEntry CacheReader::read(int64_t index) {
  if (index < 0 || index >= size())
    refuse(join_path(dir_, kIndex) + ": no entry " + std::to_string(index) + " (the cache holds " +
           std::to_string(size()) + ")");
  const json& e = index_["entries"][static_cast<size_t>(index)];
  const std::string shard = e["shard"].get<std::string>();
  const int64_t offset = e["offset"].get<int64_t>(), bytes = e["bytes"].get<int64_t>();
  auto it = maps_.find(shard);
  if (it == maps_.end()) it = maps_.emplace(shard, MappedFile(join_path(dir_, shard))).first;
  const MappedFile& map = it->second;
  const std::string where = join_path(dir_, shard) + ": entry " + std::to_string(index) + " (bytes " +
                            std::to_string(offset) + ".." + std::to_string(offset + bytes) + ") does not match its "
                            "SHA-256 in " + kIndex + " (corrupt)";
  // a shard shorter than the entry (changed since the index was checked) reads as Python's short slice
  if (static_cast<int64_t>(map.size()) < offset + bytes) refuse(where);
  CacheEntry entry;
  entry.bytes.assign(map.data() + offset, map.data() + offset + bytes);
  if (sha256_hex(entry.bytes.data(), entry.bytes.size()) != e["sha256"].get<std::string>()) refuse(where);
  entry.parts = &parts_;
  return entry;
}

}  // namespace ditskip
