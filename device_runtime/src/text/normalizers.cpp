// The `normalizer` step (`tokenizers`' normalizers): a tokenizer.json `normalizer` entry -> a
// text -> text function. Precompiled is SentencePiece's charsmap (a darts-clone double-array trie over UTF-8 keys
// and a pool of NUL-terminated replacements), applied per grapheme cluster as `spm_precompiled` does: a cluster under
// 6 bytes is looked up whole; otherwise (or with no hit) each character is; a lookup takes the shortest key that
// prefixes the chunk.
#include <cstring>

#include "text/components.h"
#include "text/regex.h"
#include "util/failure.h"

namespace ditskip::text {

namespace {

constexpr size_t PRECOMPILED_WHOLE_GRAPHEME_BYTES = 6;

class Precompiled {
 public:
  explicit Precompiled(const std::vector<uint8_t>& charsmap, const std::string& where) {
    if (charsmap.size() < 4) refuse(where + ": precompiled_charsmap is shorter than its header");
    uint32_t trie_bytes = 0;
    std::memcpy(&trie_bytes, charsmap.data(), 4);            // little-endian on every target this builds for
    if (4 + static_cast<size_t>(trie_bytes) > charsmap.size() || trie_bytes % 4 != 0 || trie_bytes == 0)
      refuse(where + ": precompiled_charsmap's trie size does not fit the blob");
    units_.resize(trie_bytes / 4);
    std::memcpy(units_.data(), charsmap.data() + 4, trie_bytes);
    pool_.assign(charsmap.begin() + 4 + trie_bytes, charsmap.end());
  }

  U32 operator()(const U32& text) const {
    U32 out;
    for (const U32& g : graphemes(text)) {
      const std::string bytes = utf8(g);
      if (bytes.size() < PRECOMPILED_WHOLE_GRAPHEME_BYTES) {
        std::string norm;
        if (transform(bytes, norm)) {
          out += utf32(norm);
          continue;
        }
      }
      for (char32_t c : g) {
        std::string norm;
        if (transform(utf8(c), norm)) out += utf32(norm);
        else out.push_back(c);
      }
    }
    return out;
  }

 private:
  std::vector<uint32_t> units_;
  std::vector<uint8_t> pool_;

  uint32_t unit(size_t pos) const {
    if (pos >= units_.size()) return 0;                     // outside the trie: no key continues here
    return units_[pos];
  }

  bool transform(const std::string& chunk, std::string& out) const {
    size_t pos = 0;
    const uint32_t root = unit(0);
    pos ^= static_cast<size_t>(root >> 10) << ((root & (1u << 9)) >> 6);
    for (unsigned char byte : chunk) {
      if (byte == 0) return false;
      pos ^= byte;
      const uint32_t u = unit(pos);
      if ((u & ((1u << 31) | 0xFFu)) != byte) return false;
      pos ^= static_cast<size_t>(u >> 10) << ((u & (1u << 9)) >> 6);
      if ((u >> 8) & 1u) {
        const size_t start = unit(pos) & ((1u << 31) - 1);
        size_t stop = start;
        while (stop < pool_.size() && pool_[stop] != 0) ++stop;
        if (start > pool_.size()) return false;
        out.assign(reinterpret_cast<const char*>(pool_.data()) + start, stop - start);
        return true;
      }
    }
    return false;
  }
};

std::vector<uint8_t> base64_decode(const std::string& text, const std::string& where) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const size_t v = alphabet.find(c);
    if (v == std::string::npos) refuse(where + ": precompiled_charsmap is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

U32 strip(const U32& text, bool left, bool right) {
  size_t i = 0, j = text.size();
  while (left && i < j && is_space(text[i])) ++i;
  while (right && j > i && is_space(text[j - 1])) --j;
  return text.substr(i, j - i);
}

Regex pattern_of(const json& spec, const std::string& where) {
  const json& p = spec.at("pattern");
  if (p.contains("String")) return Regex::literal(utf32(p["String"].get<std::string>()));
  if (p.contains("Regex")) return Regex(p["Regex"].get<std::string>(), where);
  refuse(where + ": pattern " + py_repr(p) + " is neither String nor Regex");
}

}  // namespace

Normalizer build_normalizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return [](const U32& s) { return s; };
  const std::string kind = type_of(spec);
  if (kind == "Sequence") {
    std::vector<Normalizer> steps;
    const json& list = spec.at("normalizers");
    for (size_t i = 0; i < list.size(); ++i)
      steps.push_back(build_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]"));
    return [steps](const U32& s) {
      U32 t = s;
      for (const auto& step : steps) t = step(t);
      return t;
    };
  }
  if (kind == "NFC") return [](const U32& s) { return normalize(s, NormalForm::NFC); };
  if (kind == "NFD") return [](const U32& s) { return normalize(s, NormalForm::NFD); };
  if (kind == "NFKC") return [](const U32& s) { return normalize(s, NormalForm::NFKC); };
  if (kind == "NFKD") return [](const U32& s) { return normalize(s, NormalForm::NFKD); };
  if (kind == "Lowercase") return [](const U32& s) { return lowercase(s); };
  if (kind == "Replace") {
    const Regex regex = pattern_of(spec, where);
    const U32 content = utf32(spec.at("content").get<std::string>());
    return [regex, content](const U32& s) {
      U32 out;
      size_t done = 0;
      for (const auto& [a, b] : regex.find_all(s)) out += s.substr(done, a - done), out += content, done = b;
      return out + s.substr(done);
    };
  }
  if (kind == "Prepend") {
    const U32 prepend = utf32(spec.at("prepend").get<std::string>());
    return [prepend](const U32& s) { return s.empty() ? s : prepend + s; };
  }
  if (kind == "Strip") {
    const bool left = flag(spec, "strip_left", false), right = flag(spec, "strip_right", false);
    return [left, right](const U32& s) { return strip(s, left, right); };
  }
  if (kind == "StripAccents") {
    return [](const U32& s) {
      U32 out;
      for (char32_t c : s)
        if (!is_mark(c)) out.push_back(c);
      return out;
    };
  }
  if (kind == "Precompiled") {
    const json& blob = spec.contains("precompiled_charsmap") ? spec["precompiled_charsmap"] : json();
    if (blob.is_null() || (blob.is_string() && blob.get<std::string>().empty()) || (blob.is_array() && blob.empty()))
      return [](const U32& s) { return s; };
    std::vector<uint8_t> bytes;
    if (blob.is_string()) bytes = base64_decode(blob.get<std::string>(), where);
    else for (const auto& b : blob) bytes.push_back(b.get<uint8_t>());
    const auto map = std::make_shared<Precompiled>(bytes, where);
    return [map](const U32& s) { return (*map)(s); };
  }
  unsupported_type(spec, where);
}

}  // namespace ditskip::text
