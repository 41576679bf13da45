// ditskip_edge/runtime/codecs.py's encoder, decoder and relative_error (see codecs.h).
#include "subject/codecs.h"

#include <cfenv>
#include <cmath>
#include <cstring>

#include "util/failure.h"

namespace ditskip {
namespace {

constexpr float kFp16Max = 65504.0f;
constexpr float kMinScale = 1e-12f;

const CachePart* find_part(const std::vector<CachePart>& layout, const std::string& name) {
  for (const CachePart& p : layout)
    if (p.name == name) return &p;
  return nullptr;
}

const CachePart& need_part(const std::vector<CachePart>& layout, const std::string& name) {
  const CachePart* p = find_part(layout, name);
  if (p == nullptr) refuse("cache entry layout has no part " + name);
  return *p;
}

// [B, N, D] as scale groups [B, N, D/g, g] (token axis) or [B, N/g, g, D] (channel axis): the flat index of the
// group value k (row-major over the group shape) and of its scale
struct Groups {
  int64_t B, N, D, g;
  bool channel;
  int64_t scales() const { return channel ? B * (N / g) * D : B * N * (D / g); }
  // the scale index of element (b, n, d)
  int64_t scale_of(int64_t b, int64_t n, int64_t d) const {
    return channel ? (b * (N / g) + n / g) * D + d : (b * N + n) * (D / g) + d / g;
  }
};

Groups groups_of(const ResidualCodec& c, const std::vector<int64_t>& s) {
  return {s[0], s[1], s[2], c.group, c.channel_axis};
}

// numpy's np.round: half to even (the default rounding mode of nearbyint)
float round_half_even(float v) { return std::nearbyint(v); }

// The SkylakeX kernel of OpenBLAS's sdot (sdot_microk_skylakex-2.c, what numpy's wheel runs on this project's
// hosts): 4 x 16 fused multiply-add accumulators over 64-element blocks, folded to 4 x 8, then 4 x 8 over 32-element
// blocks, summed ((a0 + a1) + a2) + a3, halves added, two horizontal adds; the n % 32 tail added in double.
float sdot_self(const float* x, int64_t n) {
  const int64_t n32 = n & ~int64_t(31), n64 = n & ~int64_t(63);
  float acc16[4][16] = {};
  int64_t i = 0;
  for (; i < n64; i += 64)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 16; ++j) {
        const float v = x[i + 16 * k + j];
        acc16[k][j] = std::fmaf(v, v, acc16[k][j]);
      }
  float acc[4][8];
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 8; ++j) acc[k][j] = acc16[k][j] + acc16[k][j + 8];
  for (; i < n32; i += 32)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 8; ++j) {
        const float v = x[i + 8 * k + j];
        acc[k][j] = std::fmaf(v, v, acc[k][j]);
      }
  float a[8];
  for (int j = 0; j < 8; ++j) a[j] = ((acc[0][j] + acc[1][j]) + acc[2][j]) + acc[3][j];
  float h[4];
  for (int j = 0; j < 4; ++j) h[j] = a[j] + a[j + 4];
  const float kernel = (h[0] + h[1]) + (h[2] + h[3]);
  double dot = n32 ? double(kernel) : 0.0;
  for (; i < n; ++i) {
    const float p = x[i] * x[i];
    dot += double(p);
  }
  return float(dot);
}

float norm32(const float* x, int64_t n) { return std::sqrt(sdot_self(x, n)); }

std::string lowrank_message(const std::string& residual) {
  return "cache codec lowrank for residual " + residual + ": the native subject stage does not encode lowrank caches "
         "(numpy's SVD cannot be matched bit for bit); run python -m ditskip_edge.runtime personalize";
}

}  // namespace

void refuse_lowrank(const std::vector<CachePart>& layout) {
  for (const CachePart& p : layout) {
    const size_t at = p.name.rfind(".u.codes");
    if (at != std::string::npos && at + 8 == p.name.size()) refuse(lowrank_message(p.name.substr(0, at)));
  }
}

uint16_t float_to_half_bits(float value) {   // numpy's npy_floatbits_to_halfbits, step for step
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint16_t h_sgn = uint16_t((f & 0x80000000u) >> 16);
  uint32_t f_exp = f & 0x7f800000u, f_sig;
  if (f_exp >= 0x47800000u) {                       // exponent overflow / nan: signed inf / nan
    if (f_exp == 0x7f800000u) {
      f_sig = f & 0x007fffffu;
      if (f_sig != 0) {
        uint16_t ret = uint16_t(0x7c00u + (f_sig >> 13));
        if (ret == 0x7c00u) ++ret;
        return uint16_t(h_sgn + ret);
      }
    }
    return uint16_t(h_sgn + 0x7c00u);
  }
  if (f_exp <= 0x38000000u) {                       // underflow: a subnormal half or signed zero
    if (f_exp < 0x33000000u) return h_sgn;
    f_exp >>= 23;
    f_sig = 0x00800000u + (f & 0x007fffffu);
    f_sig >>= (113 - f_exp);
    if ((f_sig & 0x00003fffu) != 0x00001000u || (f & 0x000007ffu)) f_sig += 0x00001000u;   // to nearest even
    return uint16_t(h_sgn + uint16_t(f_sig >> 13));  // a carry into the exponent is the right result
  }
  const uint16_t h_exp = uint16_t((f_exp - 0x38000000u) >> 13);
  f_sig = f & 0x007fffffu;
  if ((f_sig & 0x00003fffu) != 0x00001000u) f_sig += 0x00001000u;
  uint16_t h_sig = uint16_t(f_sig >> 13);
  h_sig = uint16_t(h_sig + h_exp);                  // a carry may overflow to inf: correct
  return uint16_t(h_sgn + h_sig);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, sig = h & 0x3ffu;
  uint32_t f;
  if (exp == 0) {
    if (sig == 0) {
      f = sign;
    } else {                                         // subnormal: normalise
      float v = std::ldexp(float(sig), -24);
      std::memcpy(&f, &v, 4);
      f |= sign;
    }
  } else if (exp == 31) {
    f = sign | 0x7f800000u | (sig << 13);
  } else {
    f = sign | ((exp + 112) << 23) | (sig << 13);
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

ResidualCodec residual_codec(const std::vector<CachePart>& layout, const std::string& name,
                             const std::vector<int64_t>& shape) {
  ResidualCodec c;
  if (const CachePart* v = find_part(layout, name + ".values")) {
    c.kind = v->dtype == "float32" ? "fp32" : "fp16";
    return c;
  }
  if (find_part(layout, name + ".u.codes") != nullptr) {
    c.kind = "lowrank";
    return c;
  }
  const CachePart& codes = need_part(layout, name + ".codes");
  const CachePart& scale = need_part(layout, name + ".scale");
  c.kind = codes.dtype == "int8" ? "int8" : "int4";
  const int64_t N = shape[1], D = shape[2];
  if (scale.shape[3] == 1 && scale.shape[1] == N) {         // [B, N, D/g, 1]: groups of channels within a token
    c.channel_axis = false;
    c.group = scale.shape[2] ? D / scale.shape[2] : D;
  } else {                                                   // [B, N/g, 1, D]
    c.channel_axis = true;
    c.group = scale.shape[1] ? N / scale.shape[1] : N;
  }
  return c;
}

std::vector<uint8_t> encode_entry(const std::vector<CachePart>& layout, int64_t entry_bytes,
                                  const std::map<std::string, FloatTensor>& tensors) {
  std::vector<uint8_t> buf(size_t(entry_bytes), 0);
  std::fesetround(FE_TONEAREST);
  for (const auto& [name, t] : tensors) {
    const float* d = t.values.data();
    const int64_t n = int64_t(t.values.size());
    if (name == "x0") {
      const CachePart& p = need_part(layout, "x0");
      std::memcpy(buf.data() + p.offset, d, size_t(n) * 4);
      continue;
    }
    if (t.shape.size() != 3) refuse("residual '" + name + "': expected [B, N, D]");
    const ResidualCodec c = residual_codec(layout, name, t.shape);
    if (c.kind == "lowrank") refuse(lowrank_message(name));
    if (c.kind == "fp32") {
      std::memcpy(buf.data() + need_part(layout, name + ".values").offset, d, size_t(n) * 4);
      continue;
    }
    if (c.kind == "fp16") {
      uint8_t* out = buf.data() + need_part(layout, name + ".values").offset;
      for (int64_t i = 0; i < n; ++i) {
        const float v = std::isnan(d[i]) ? d[i] : std::fmin(std::fmax(d[i], -kFp16Max), kFp16Max);
        const uint16_t h = float_to_half_bits(v);
        out[2 * i] = uint8_t(h & 0xff);
        out[2 * i + 1] = uint8_t(h >> 8);
      }
      continue;
    }
    const float qmax = c.kind == "int8" ? 127.0f : 7.0f;
    const Groups g = groups_of(c, t.shape);
    std::vector<float> absmax(size_t(g.scales()), 0.0f);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t r = 0; r < g.N; ++r)
        for (int64_t k = 0; k < g.D; ++k) {
          float& m = absmax[size_t(g.scale_of(b, r, k))];
          const float a = std::fabs(d[(b * g.N + r) * g.D + k]);
          if (a > m || std::isnan(a)) m = a;
        }
    float* scale = reinterpret_cast<float*>(buf.data() + need_part(layout, name + ".scale").offset);
    for (size_t s = 0; s < absmax.size(); ++s) {
      const float q = absmax[s] / qmax;
      scale[s] = std::isnan(q) ? q : std::fmax(q, kMinScale);
    }
    uint8_t* codes = buf.data() + need_part(layout, name + ".codes").offset;
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t r = 0; r < g.N; ++r)
        for (int64_t k = 0; k < g.D; ++k) {
          const int64_t i = (b * g.N + r) * g.D + k;
          float q = round_half_even(d[i] / scale[g.scale_of(b, r, k)]);
          q = std::fmin(std::fmax(q, -qmax), qmax);
          const int code = int(q);
          if (c.kind == "int8") {
            codes[i] = uint8_t(int8_t(code));
          } else {
            const int u = code + 8;                   // 1..15; even channel low nibble
            if (k % 2 == 0) codes[i / 2] = uint8_t(u);
            else codes[i / 2] = uint8_t(codes[i / 2] + 16 * u);
          }
        }
  }
  return buf;
}

std::vector<float> decode_residual(const std::vector<CachePart>& layout, const uint8_t* entry, const std::string& name,
                                   const std::vector<int64_t>& shape) {
  const ResidualCodec c = residual_codec(layout, name, shape);
  const int64_t n = shape[0] * shape[1] * shape[2];
  std::vector<float> out(static_cast<size_t>(n));
  if (c.kind == "fp32") {
    std::memcpy(out.data(), entry + need_part(layout, name + ".values").offset, size_t(n) * 4);
  } else if (c.kind == "fp16") {
    const uint8_t* v = entry + need_part(layout, name + ".values").offset;
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = half_bits_to_float(uint16_t(v[2 * i] | (v[2 * i + 1] << 8)));
  } else if (c.kind == "int8" || c.kind == "int4") {
    const Groups g = groups_of(c, shape);
    const uint8_t* codes = entry + need_part(layout, name + ".codes").offset;
    float scale_at;
    const uint8_t* scale = entry + need_part(layout, name + ".scale").offset;
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t r = 0; r < g.N; ++r)
        for (int64_t k = 0; k < g.D; ++k) {
          const int64_t i = (b * g.N + r) * g.D + k;
          float q;
          if (c.kind == "int8") q = float(int8_t(codes[i]));
          else q = float(k % 2 == 0 ? codes[i / 2] % 16 : codes[i / 2] / 16) - 8.0f;
          std::memcpy(&scale_at, scale + 4 * g.scale_of(b, r, k), 4);
          out[size_t(i)] = q * scale_at;
        }
  } else {
    refuse("cache codec lowrank for residual " + name + ": the native subject stage does not decode lowrank caches");
  }
  return out;
}

double relative_error(const float* d_hat, const float* d, int64_t count) {
  std::vector<float> diff(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) diff[size_t(i)] = d_hat[i] - d[i];
  const float num = norm32(diff.data(), count);
  const float den = float(std::fmax(double(norm32(d, count)), 1e-30));
  return double(num / den);
}

}  // namespace ditskip
