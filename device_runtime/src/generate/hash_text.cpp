// hash_text.py, operation for operation (see hash_text.h).
#include "generate/hash_text.h"

#include <cstring>
#include <utility>

#include "bundle/rng.h"
#include "util/sha256.h"

namespace ditskip::generate::hash_text {
namespace {

constexpr uint64_t kPositionSeed = 1234;
constexpr float kPositionScale = 0.1f;

// One UTF-8 code point at s[i] (advancing i); a malformed byte is taken as itself.
uint32_t next_code_point(const std::string& s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  int n = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : 0;
  uint32_t cp = n == 0 ? b : n == 1 ? (b & 0x1F) : n == 2 ? (b & 0x0F) : (b & 0x07);
  ++i;
  for (int k = 0; k < n && i < s.size(); ++k, ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
  return cp;
}

}  // namespace

std::vector<std::string> words(const std::string& prompt) {
  // WORD.findall(prompt.lower()): only ASCII letters and digits form words; of the non-ASCII code points, str.lower()
  // turns two into ASCII letters (U+212A KELVIN SIGN -> "k", U+0130 -> "i" + U+0307), the rest stay separators.
  std::vector<std::string> out;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) out.push_back(word);
    word.clear();
  };
  for (size_t i = 0; i < prompt.size();) {
    const uint32_t cp = next_code_point(prompt, i);
    char c = 0;
    if (cp >= 'A' && cp <= 'Z') c = char(cp - 'A' + 'a');
    else if ((cp >= 'a' && cp <= 'z') || (cp >= '0' && cp <= '9')) c = char(cp);
    else if (cp == 0x212A) c = 'k';
    if (c != 0) {
      word.push_back(c);
    } else if (cp == 0x130) {
      word.push_back('i');
      flush();                                  // the combining dot after it ends the word
    } else {
      flush();
    }
  }
  flush();
  return out;
}

uint64_t word_seed(const std::string& word) {
  Sha256 h;
  h.update(word.data(), word.size());
  const std::string hex = h.hex_digest();
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | std::stoul(hex.substr(size_t(2 * k), 2), nullptr, 16);
  return v & ((uint64_t(1) << 63) - 1);
}

NamedFloats encode(const std::string& prompt, const std::string& arch, int seq_len, int dim, int pooled_dim) {
  std::vector<std::string> ws = words(prompt);
  if (int64_t(ws.size()) > seq_len) ws.resize(size_t(seq_len));
  std::vector<float> pos(size_t(seq_len) * size_t(dim));
  rng::normal(kPositionSeed, pos.data(), int64_t(pos.size()));
  for (float& p : pos) p = p * kPositionScale;
  std::vector<float> txt(pos.size(), 0.0f), mask(static_cast<size_t>(seq_len), 0.0f), vec(static_cast<size_t>(dim));
  for (size_t i = 0; i < ws.size(); ++i) {
    rng::normal(word_seed(ws[i]), vec.data(), dim);
    for (int d = 0; d < dim; ++d) txt[i * size_t(dim) + size_t(d)] = vec[size_t(d)] + pos[i * size_t(dim) + size_t(d)];
    mask[i] = 1.0f;
  }
  NamedFloats cond;
  cond["cond.txt"] = Floats({1, seq_len, dim}, std::move(txt));
  if (arch == "flux") {
    // np.sum(np.stack(vectors), axis=0, dtype=float32) / float32(n): the rows added in order
    std::vector<float> pooled(static_cast<size_t>(pooled_dim), 0.0f), pv(static_cast<size_t>(pooled_dim));
    if (!ws.empty()) {
      for (size_t i = 0; i < ws.size(); ++i) {
        rng::normal(word_seed(ws[i]), pv.data(), pooled_dim);
        for (int d = 0; d < pooled_dim; ++d) pooled[size_t(d)] = i == 0 ? pv[size_t(d)] : pooled[size_t(d)] + pv[size_t(d)];
      }
      const float n = float(ws.size());
      for (float& v : pooled) v = v / n;
    }
    cond["cond.pooled"] = Floats({1, pooled_dim}, std::move(pooled));
  } else {
    cond["cond.txt_mask"] = Floats({1, seq_len}, std::move(mask));
  }
  return cond;
}

}  // namespace ditskip::generate::hash_text
