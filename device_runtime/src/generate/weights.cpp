// weights.py, operation for operation (see weights.h).
#include "generate/weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "util/failure.h"
#include "util/shape.h"

namespace ditskip::generate {
namespace {

const std::map<std::string, std::string>& numpy_names() {
  static const std::map<std::string, std::string> names = {
      {"F32", "float32"}, {"I8", "int8"}, {"U8", "uint8"}, {"I64", "int64"}};
  return names;
}

int64_t st_itemsize(const std::string& dtype) { return dtype == "I64" ? 8 : dtype == "F32" ? 4 : 1; }

template <typename T>
T load(const void* base, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + i * int64_t(sizeof(T)), sizeof(T));
  return v;
}

template <typename T>
StTensor st_of(const std::string& dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  StTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// _symmetric: one scale per group of g consecutive values of w (rows of [..., G]); codes clip(round(w * (1 / s))).
void symmetric(const float* w, int64_t groups, int64_t g, int bits, int8_t* codes, float* scales) {
  const int qmax = bits == 8 ? 127 : 7, qmin = -qmax - 1;
  const float half_range = float(double(qmax - qmin) / 2.0);
  for (int64_t k = 0; k < groups; ++k) {
    const float* row = w + k * g;
    float mn = row[0], mx = row[0];
    for (int64_t j = 1; j < g; ++j) {
      mn = std::min(mn, row[j]);
      mx = std::max(mx, row[j]);
    }
    const float max_abs = std::max(-std::min(mn, 0.0f), std::max(mx, 0.0f));
    const float scale = std::max(max_abs / half_range, 1e-12f);
    const float inv = 1.0f / scale;
    scales[k] = scale;
    for (int64_t j = 0; j < g; ++j) {
      const float q = std::nearbyint(row[j] * inv);               // np.round: half to even
      codes[k * g + j] = int8_t(std::min(std::max(q, float(qmin)), float(qmax)));
    }
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------ MappedWeights
MappedWeights::MappedWeights(const std::string& path) : path_(path) {
  const int64_t size = file_size(path);
  if (!is_file(path) || size < 0) refuse(path + ": weights file missing");
  map_ = MappedFile(path);
  if (size < 8) refuse(path + ": not a safetensors file (truncated header)");
  const uint64_t n = load<uint64_t>(map_.data(), 0);
  if (n > uint64_t(size) - 8) refuse(path + ": not a safetensors file (header length " + std::to_string(n) + " > file size)");
  json header;
  try {
    header = json::parse(map_.data() + 8, map_.data() + 8 + n);
  } catch (const json::exception&) {
    refuse(path + ": not a safetensors file (its header is not JSON)");
  }
  if (!header.is_object()) refuse(path + ": not a safetensors file (its header is not a JSON object)");
  metadata_ = json::object();
  data_offset_ = 8 + n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it.value().is_object()) metadata_ = it.value();
      continue;
    }
    const json& e = it.value();
    Entry entry;
    entry.dtype = e.at("dtype").get<std::string>();
    entry.shape = e.at("shape").get<std::vector<int64_t>>();
    entry.begin = e.at("data_offsets").at(0).get<uint64_t>();
    entry.end = e.at("data_offsets").at(1).get<uint64_t>();
    if (entry.begin > entry.end || data_offset_ + entry.end > uint64_t(size))
      refuse(path + ": tensor " + it.key() + " lies outside the file");
    entries_[it.key()] = std::move(entry);
  }
}

const MappedWeights::Entry& MappedWeights::entry(const std::string& key) const {
  const auto it = entries_.find(key);
  if (it == entries_.end()) refuse(path_ + ": no tensor " + py_repr(json(key)));
  return it->second;
}

std::vector<int64_t> MappedWeights::shape(const std::string& key) const { return entry(key).shape; }
std::string MappedWeights::st_dtype(const std::string& key) const { return entry(key).dtype; }

WeightView MappedWeights::view(const std::string& key) const {
  const Entry& e = entry(key);
  const auto name = numpy_names().find(e.dtype);
  if (name == numpy_names().end())
    refuse(path_ + ": tensor " + key + " has dtype " + e.dtype + ", expected one of ['F32', 'I8', 'U8', 'I64']");
  if (uint64_t(numel(e.shape) * st_itemsize(e.dtype)) != e.end - e.begin)
    refuse(path_ + ": tensor " + key + " has " + std::to_string(e.end - e.begin) + " bytes, its shape needs " +
           std::to_string(numel(e.shape) * st_itemsize(e.dtype)));
  return {name->second, e.shape, map_.data() + data_offset_ + e.begin};
}

// ------------------------------------------------------------------------------------------------ quantization
std::vector<float> dequantize_linear(const std::map<std::string, WeightView>& states, int64_t& o, int64_t& in) {
  if (states.count("weight")) {
    const WeightView& w = states.at("weight");
    o = w.shape.at(0);
    in = w.shape.at(1);
    std::vector<float> out(static_cast<size_t>(o * in));
    std::memcpy(out.data(), w.data, out.size() * 4);
    return out;
  }
  const WeightView& scale = states.at("w_scale");
  if (states.count("w_codes")) {
    const WeightView& c = states.at("w_codes");
    o = c.shape.at(0);
    in = c.shape.at(1);
    std::vector<float> out(static_cast<size_t>(o * in));
    for (int64_t r = 0; r < o; ++r) {
      const float s = load<float>(scale.data, r);
      for (int64_t j = 0; j < in; ++j) out[size_t(r * in + j)] = float(load<int8_t>(c.data, r * in + j)) * s;
    }
    return out;
  }
  const WeightView& p = states.at("w_packed");
  o = p.shape.at(0);
  const int64_t half = p.shape.at(1);
  in = 2 * half;
  const int64_t groups = scale.shape.at(1), g = in / groups;
  std::vector<float> out(static_cast<size_t>(o * in));
  for (int64_t r = 0; r < o; ++r)
    for (int64_t j = 0; j < in; ++j) {
      const int byte = load<uint8_t>(p.data, r * half + j / 2);
      const float q = float(j % 2 == 0 ? byte % 16 : byte / 16) - 8.0f;
      out[size_t(r * in + j)] = q * load<float>(scale.data, r * groups + j / g);
    }
  return out;
}

std::map<std::string, StTensor> quantize_linear(const std::vector<float>& w, int64_t o, int64_t in,
                                                const std::string& precision, int64_t group) {
  std::map<std::string, StTensor> out;
  if (precision == "fp32") {
    out["weight"] = st_of("F32", {o, in}, w);
  } else if (precision == "int8") {
    std::vector<int8_t> codes(static_cast<size_t>(o * in));
    std::vector<float> scale(static_cast<size_t>(o));
    symmetric(w.data(), o, in, 8, codes.data(), scale.data());
    out["w_codes"] = st_of("I8", {o, in}, codes);
    out["w_scale"] = st_of("F32", {o, 1}, scale);
  } else if (precision == "int4") {
    const int64_t g = in % group == 0 ? group : in;
    std::vector<int8_t> codes(static_cast<size_t>(o * in));
    std::vector<float> scale(static_cast<size_t>(o * (in / g)));
    symmetric(w.data(), o * (in / g), g, 4, codes.data(), scale.data());
    std::vector<uint8_t> packed(static_cast<size_t>(o * (in / 2)));
    for (int64_t r = 0; r < o; ++r)
      for (int64_t k = 0; k < in / 2; ++k) {
        const auto lo = uint8_t(codes[size_t(r * in + 2 * k)] + 8), hi = uint8_t(codes[size_t(r * in + 2 * k + 1)] + 8);
        packed[size_t(r * (in / 2) + k)] = uint8_t(lo + hi * 16);
      }
    out["w_packed"] = st_of("U8", {o, in / 2}, packed);
    out["w_scale"] = st_of("F32", {o, in / g, 1}, scale);
  } else {
    refuse("precision " + py_repr(json(precision)) + ": expected fp32, int8 or int4");
  }
  return out;
}

std::map<std::string, StTensor> merge_lora(const std::map<std::string, WeightView>& states,
                                           const std::vector<float>& lora_a, const std::vector<float>& lora_b,
                                           int64_t rank, double scale) {
  int64_t o = 0, in = 0;
  std::vector<float> w = dequantize_linear(states, o, in);
  const int64_t a_cols = rank > 0 ? int64_t(lora_a.size()) / rank : 0, b_rows = rank > 0 ? int64_t(lora_b.size()) / rank : 0;
  if (a_cols != in || b_rows != o)
    refuse("LoRA B @ A has shape [" + std::to_string(b_rows) + ", " + std::to_string(a_cols) + "], the frozen weight [" +
           std::to_string(o) + ", " + std::to_string(in) + "]");
  const float s = float(scale);
  for (int64_t r = 0; r < o; ++r)
    for (int64_t j = 0; j < in; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < rank; ++k) acc = std::fma(lora_b[size_t(r * rank + k)], lora_a[size_t(k * in + j)], acc);
      w[size_t(r * in + j)] = w[size_t(r * in + j)] + s * acc;
    }
  const std::string precision = states.count("weight") ? "fp32" : states.count("w_codes") ? "int8" : "int4";
  const int64_t group = precision == "int4" ? in / states.at("w_scale").shape.at(1) : 32;
  return quantize_linear(w, o, in, precision, group);
}

// ------------------------------------------------------------------------------------------------ writer
WeightsWriter::WeightsWriter(const std::string& path,
                             const std::map<std::string, std::pair<std::string, std::vector<int64_t>>>& layout,
                             const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_(path + ".tmp") {
  std::vector<std::string> order;
  for (const auto& [key, spec] : layout) order.push_back(key);
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    return st_itemsize(layout.at(a).first) > st_itemsize(layout.at(b).first);   // keys already sorted
  });
  json meta = json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  header_ = json::object();
  header_["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const std::string& key : order) {
    const auto& [dtype, shape] = layout.at(key);
    const uint64_t n = uint64_t(numel(shape) * st_itemsize(dtype));
    header_[key] = json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", json::array({offset, offset + n})}};
    offset += n;
  }
  PyDumps how;
  how.item_separator = ",";
  how.key_separator = ":";
  std::string text = py_dumps(header_, how);
  text.append((8 - text.size() % 8) % 8, ' ');
  base_ = 8 + text.size();
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_dirs(path.substr(0, slash));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) io_failure("cannot write " + tmp_ + ": " + std::strerror(errno));
  std::string head(8, '\0');
  const uint64_t len = text.size();
  for (int k = 0; k < 8; ++k) head[size_t(k)] = char((len >> (8 * k)) & 0xFF);
  head += text;
  if (::pwrite(fd_, head.data(), head.size(), 0) != ssize_t(head.size()) || ::ftruncate(fd_, off_t(base_ + offset)) != 0)
    io_failure("cannot write " + tmp_ + ": " + std::strerror(errno));
}

WeightsWriter::~WeightsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void WeightsWriter::put(const std::string& key, const StTensor& t) {
  const auto e = key == "__metadata__" ? header_.end() : header_.find(key);
  if (e == header_.end() || written_.count(key) || (*e)["dtype"].get<std::string>() != t.dtype ||
      (*e)["shape"].get<std::vector<int64_t>>() != t.shape)
    refuse(path_ + ": tensor " + py_repr(json(key)) + " " + numpy_names().at(t.dtype) + shape_repr(t.shape) +
           " is not in the layout (or came twice)");
  const uint64_t at = base_ + (*e)["data_offsets"][0].get<uint64_t>();
  size_t done = 0;
  while (done < t.bytes.size()) {
    const ssize_t n = ::pwrite(fd_, t.bytes.data() + done, t.bytes.size() - done, off_t(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_failure("cannot write " + tmp_ + ": " + std::strerror(errno));
    done += size_t(n);
  }
  written_[key] = true;
}

void WeightsWriter::commit() {
  std::vector<std::string> missing;
  for (auto it = header_.begin(); it != header_.end(); ++it)
    if (it.key() != "__metadata__" && !written_.count(it.key())) missing.push_back(it.key());
  if (!missing.empty()) {
    std::sort(missing.begin(), missing.end());
    missing.resize(std::min<size_t>(missing.size(), 3));
    refuse(path_ + ": tensors " + py_repr(json(missing)) + " were never written");
  }
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    fd_ = -1;
    io_failure("cannot write " + tmp_ + ": " + std::strerror(errno));
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) io_failure("cannot rename " + tmp_ + " to " + path_ + ": " + std::strerror(errno));
  committed_ = true;
}

}  // namespace ditskip::generate
