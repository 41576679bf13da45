// safetensors: the writer of ditskip_edge/runtime/safetensors_io.py (byte for byte) and a reader of any valid file.
#include "bundle/safetensors.h"

#include <cstring>
#include <limits>

#include "util/failure.h"
#include "util/files.h"
#include "util/json.h"

namespace ditskip {
namespace {

int64_t dtype_size(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16") return 2;
  if (dtype == "I8" || dtype == "U8") return 1;
  return 0;
}

uint64_t element_count(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::numeric_limits<uint64_t>::max();
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / 16 / static_cast<uint64_t>(d))
      return std::numeric_limits<uint64_t>::max();
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

namespace {

StViews views_of(const StTensors& tensors) {
  StViews views;
  for (const auto& [key, t] : tensors) views[key] = StView{t.dtype, t.shape, t.bytes.data(), t.bytes.size()};
  return views;
}

// The 8-byte length and the header JSON (padded with spaces to a multiple of 8) of these tensors.
std::string header_bytes(const StViews& tensors, const StMetadata& metadata) {
  json header = json::object();
  json meta = json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;          // std::map: sorted, as Python's sorted(metadata)
  header["__metadata__"] = std::move(meta);
  uint64_t offset = 0;
  for (const auto& [key, t] : tensors) {                     // sorted keys, as Python's sorted(tensors)
    if (t.dtype != "F32" && t.dtype != "F16")
      refuse("tensor " + key + ": dtype " + t.dtype + " is not float32 / float16");
    const uint64_t n = element_count(t.shape);
    if (n == std::numeric_limits<uint64_t>::max() || n * dtype_size(t.dtype) != t.bytes)
      refuse("tensor " + key + ": " + std::to_string(t.bytes) + " bytes do not fill its shape and dtype " + t.dtype);
    json shape = json::array();
    for (int64_t d : t.shape) shape.push_back(d);
    if (t.shape.empty()) shape.push_back(1);   // np.ascontiguousarray makes a 0-d array [1]: Python writes [1]
    header[key] = json{{"dtype", t.dtype}, {"shape", shape}, {"data_offsets", json::array({offset, offset + t.bytes})}};
    offset += t.bytes;
  }
  PyDumps how;
  how.item_separator = ",";
  how.key_separator = ":";
  std::string text = py_dumps(header, how);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = text.size();
  for (int k = 0; k < 8; ++k) out[k] = static_cast<char>((len >> (8 * k)) & 0xFF);   // little-endian
  return out + text;
}

}  // namespace

std::string safetensors_bytes(const StTensors& tensors, const StMetadata& metadata) {
  std::string out = header_bytes(views_of(tensors), metadata);
  for (const auto& [key, t] : tensors) out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  return out;
}

void write_safetensors(const std::string& path, const StTensors& tensors, const StMetadata& metadata) {
  write_safetensors(path, views_of(tensors), metadata);
}

void write_safetensors(const std::string& path, const StViews& tensors, const StMetadata& metadata) {
  const std::string header = header_bytes(tensors, metadata);
  std::vector<WritePiece> pieces{{header.data(), header.size()}};
  for (const auto& [key, t] : tensors) pieces.push_back({t.data, t.bytes});
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_dirs(path.substr(0, slash));
  atomic_write(path, pieces);
}

void read_safetensors(const std::string& path, StTensors& tensors, StMetadata& metadata) {
  tensors.clear();
  metadata.clear();
  const std::vector<uint8_t> raw = read_bytes(path);
  const auto bad = [&](const std::string& why) { refuse(path + ": not a safetensors file (" + why + ")"); };
  if (raw.size() < 8) bad("shorter than its 8-byte header length");
  uint64_t len = 0;
  for (int k = 7; k >= 0; --k) len = (len << 8) | raw[k];
  if (len > raw.size() - 8) bad("header length " + std::to_string(len) + " beyond the file's " + std::to_string(raw.size()) + " bytes");
  json header;
  try {
    header = json::parse(raw.begin() + 8, raw.begin() + 8 + static_cast<std::ptrdiff_t>(len));
  } catch (const json::exception& e) {
    bad(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) bad("header is not a JSON object");
  const uint64_t data_bytes = raw.size() - 8 - len;
  const uint8_t* data = raw.data() + 8 + len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad("__metadata__." + m.key() + " is not a string");
        metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) bad("tensor " + key + " is not an object");
    const auto dt = v.find("dtype"), shape = v.find("shape"), offsets = v.find("data_offsets");
    if (dt == v.end() || shape == v.end() || offsets == v.end()) bad("tensor " + key + " lacks dtype, shape or data_offsets");
    if (!dt->is_string() || dtype_size(dt->get<std::string>()) == 0)
      refuse(path + ": tensor " + key + " has dtype " + py_str(*dt) + ", expected F32, F16, I8 or U8");
    StTensor t;
    t.dtype = dt->get<std::string>();
    if (!shape->is_array()) bad("tensor " + key + ": shape is not a list");
    for (const json& d : *shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX)) bad("tensor " + key + ": shape is not a list of sizes");
      t.shape.push_back(d.get<int64_t>());
    }
    if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned())
      bad("tensor " + key + ": data_offsets is not [begin, end]");
    const uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
    if (begin > end || end > data_bytes)
      refuse(path + ": tensor " + key + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
             "] outside the file's " + std::to_string(data_bytes) + " data bytes");
    const uint64_t n = element_count(t.shape);
    if (n == std::numeric_limits<uint64_t>::max() || n * static_cast<uint64_t>(dtype_size(t.dtype)) != end - begin)
      refuse(path + ": tensor " + key + " has " + std::to_string(end - begin) + " bytes, its shape and dtype need " +
             std::to_string(n * static_cast<uint64_t>(dtype_size(t.dtype))));
    t.bytes.assign(data + begin, data + end);
    tensors[key] = std::move(t);
  }
}

}  // namespace ditskip
