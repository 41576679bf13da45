// safetensors as the runtime writes and reads it (ditskip_edge/runtime/safetensors_io.py): 8-byte little-endian
// header length, header JSON {"__metadata__": {sorted}, key: {"dtype", "shape", "data_offsets"} in sorted key
// order} with separators (",", ":"), padded with spaces to a multiple of 8, then the tensors' bytes in key order.
// The same tensors always give the same bytes: the native core's LoRA and checkpoint equal the Python runtime's
// file for file. As Python's writer (np.ascontiguousarray), a scalar (shape []) is written with shape [1].
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ditskip {

struct StTensor {
  std::string dtype = "F32";           // F32 (F16 read only)
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;          // little-endian
};

using StTensors = std::map<std::string, StTensor>;           // sorted by key

struct StView {                        // a tensor in the caller's memory, written without a copy
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};
using StViews = std::map<std::string, StView>;               // sorted by key
using StMetadata = std::map<std::string, std::string>;

std::string safetensors_bytes(const StTensors& tensors, const StMetadata& metadata);
void write_safetensors(const std::string& path, const StTensors& tensors, const StMetadata& metadata);   // atomic
// The same bytes from views: the header, then each tensor straight from its buffer into the file (the checkpoint's
// parameters and AdamW moments are written without a copy of them).
void write_safetensors(const std::string& path, const StViews& tensors, const StMetadata& metadata);
// Reads a whole file; refuses (naming the path) a header that is not safetensors, offsets outside the file, or a
// dtype other than F32 / F16 / I8 / U8.
void read_safetensors(const std::string& path, StTensors& tensors, StMetadata& metadata);

}  // namespace ditskip
