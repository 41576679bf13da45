// The residual-cache codecs' encode side (ditskip_edge/runtime/codecs.py encode_entry / decode_entry /
// relative_error) on cache_format.py's layouts (bundle/cache_reader.h entry_layout). The codes are numpy's bit for
// bit: fp32 as is; fp16 clipped to +-65504 and rounded to nearest even (subnormals included), stored as its
// little-endian bytes; int8 / int4 symmetric, scale = max(absmax / qmax, MIN_SCALE) in float32 per group (a group
// size that does not divide its axis spans the whole axis), code = clip(round_half_even(d / scale), -qmax, qmax);
// int4 packed two a byte (low nibble = even channel, value = nibble - 8). lowrank needs numpy's LAPACK SVD, which
// the core cannot match bit for bit: it is refused ("cache codec lowrank-rR: the native subject stage does not
// encode lowrank caches; run the subject stage with python -m ditskip_edge.runtime personalize").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bundle/cache_reader.h"

namespace ditskip {

struct FloatTensor {                          // float32, C order
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// The codec of one residual as its parts in `layout` say (fp32 | fp16 | int8 | int4 | lowrank, its scale groups).
struct ResidualCodec {
  std::string kind;                           // fp32 | fp16 | int8 | int4 | lowrank
  bool channel_axis = false;                  // int8/int4: one scale per group of tokens within a channel
  int64_t group = 0;                          // the group's size along its axis (the whole axis when it spans it)
};
ResidualCodec residual_codec(const std::vector<CachePart>& layout, const std::string& name,
                             const std::vector<int64_t>& shape);

// encode_entry + CacheWriter.add's packing: {"x0", residual: float32} -> one entry's bytes in `layout` order
// (padding zero). Refuses a lowrank residual.
std::vector<uint8_t> encode_entry(const std::vector<CachePart>& layout, int64_t entry_bytes,
                                  const std::map<std::string, FloatTensor>& tensors);
// Refuses a layout with a lowrank residual before any work (the message encode_entry would give at the first entry).
void refuse_lowrank(const std::vector<CachePart>& layout);
// decode_entry of one residual from an entry's bytes (what the program's in-graph decoder computes).
std::vector<float> decode_residual(const std::vector<CachePart>& layout, const uint8_t* entry, const std::string& name,
                                   const std::vector<int64_t>& shape);
// codecs.py relative_error: ||d_hat - d|| / max(||d||, 1e-30) as numpy computes it (np.linalg.norm of float32:
// sqrt of OpenBLAS sdot, float32), returned as the float64 Python records.
double relative_error(const float* d_hat, const float* d, int64_t count);

// numpy's float32 -> float16 (npy_floatbits_to_halfbits: round to nearest even, subnormals, overflow to inf)
uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);

}  // namespace ditskip
