// Frozen weights for generation (ditskip_edge/runtime/weights.py): a safetensors file memory-mapped once, its tensors
// handed out as views of the mapping (clean file-backed pages, never copied), and the trained LoRA merged into the
// linears at the weights' bit width, written as weights.py write_weights_streamed writes it (same header bytes).
//
// Layouts (per linear): fp32 weight F32 [O, I]; int8 w_codes I8 [O, I] + w_scale F32 [O, 1] (per output channel);
// int4 w_packed U8 [O, I/2] + w_scale F32 [O, I/g, 1] (per group of g inputs; codes + 8, low nibble = even column).
// Quantization: scale = max(max|w| / ((qmax - qmin) / 2), 1e-12), code = clip(round_half_even(w * (1 / scale))),
// in float32. merge: W' = dequantize(W) + scale * (B @ A), B @ A accumulated over the rank in order with fused
// multiply-adds from zero, as OpenBLAS' sgemm kernel does for these shapes on x86-64 (numpy's matmul; checked in
// tests/test_native_generate.py: equal codes there, where another BLAS kernel could round a code one step apart).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bundle/safetensors.h"
#include "util/files.h"
#include "util/json.h"

namespace ditskip::generate {

struct WeightView {                        // a tensor of the mapped file, in place
  std::string dtype;                       // numpy's name: float32 | int8 | uint8 | int64
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

class MappedWeights {
 public:
  // Refuses as weights.py MappedWeights: "<path>: weights file missing", "... not a safetensors file (...)".
  explicit MappedWeights(const std::string& path);
  const std::string& path() const { return path_; }
  const json& metadata() const { return metadata_; }          // {} when the file has none
  bool contains(const std::string& key) const { return entries_.count(key) != 0; }
  std::vector<int64_t> shape(const std::string& key) const;    // refuses an absent key
  std::string st_dtype(const std::string& key) const;          // F32 | I8 | U8 | I64 | another (as written)
  WeightView view(const std::string& key) const;               // "<path>: no tensor 'key'" when absent

 private:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
  };
  const Entry& entry(const std::string& key) const;
  std::string path_;
  MappedFile map_;
  json metadata_;
  std::map<std::string, Entry> entries_;
  uint64_t data_offset_ = 0;
};

// A linear's states by name ("weight" | "w_codes" + "w_scale" | "w_packed" + "w_scale") -> float32 [O, I].
std::vector<float> dequantize_linear(const std::map<std::string, WeightView>& states, int64_t& out_o, int64_t& out_i);
// float32 [O, I] -> the states of `precision` (fp32 | int8 | int4), as StTensor (F32 / I8 / U8, little-endian bytes).
std::map<std::string, StTensor> quantize_linear(const std::vector<float>& w, int64_t o, int64_t i,
                                                const std::string& precision, int64_t group = 32);
// The linear's states with scale * (B @ A) merged in at their own bit width. lora_a [r, I], lora_b [O, r] float32.
std::map<std::string, StTensor> merge_lora(const std::map<std::string, WeightView>& states,
                                           const std::vector<float>& lora_a, const std::vector<float>& lora_b,
                                           int64_t rank, double scale);

// weights.py write_weights_streamed: `layout` {key: (safetensors dtype, shape)} fixes the header (widest dtypes first,
// then by key; metadata sorted; separators (",", ":"); padded with spaces to 8); each tensor is written at its offset
// as it comes, to <path>.tmp, renamed onto path once every key came exactly once (otherwise nothing is left).
class WeightsWriter {
 public:
  WeightsWriter(const std::string& path, const std::map<std::string, std::pair<std::string, std::vector<int64_t>>>& layout,
                const std::map<std::string, std::string>& metadata);
  ~WeightsWriter();                              // removes the temporary file unless committed
  void put(const std::string& key, const StTensor& tensor);
  void commit();

 private:
  std::string path_, tmp_;
  json header_;
  uint64_t base_ = 0;
  int fd_ = -1;
  std::map<std::string, bool> written_;
  bool committed_ = false;
};

}  // namespace ditskip::generate
