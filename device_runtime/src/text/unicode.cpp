#include "text/unicode.h"

#include <cstdlib>
#include <utf8proc.h>

#include "util/failure.h"

namespace ditskip::text {

U32 utf32(const std::string& s) {
  U32 out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    if (n <= 0) refuse("text is not UTF-8 (byte " + std::to_string(s.size() - left) + ")");
    out.push_back(static_cast<char32_t>(c));
    p += n;
    left -= n;
  }
  return out;
}

std::string utf8(char32_t c) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string utf8(const U32& text) {
  std::string out;
  out.reserve(text.size());
  utf8proc_uint8_t buf[4];
  for (char32_t c : text) {
    const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

namespace {
utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
}  // namespace

bool is_letter(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
bool is_number(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}
bool is_decimal(char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; }
bool is_mark(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME;
}
bool is_nonspacing_mark(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }
bool is_punctuation(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}
bool is_other(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_CN || (k >= UTF8PROC_CATEGORY_CC && k <= UTF8PROC_CATEGORY_CO);
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  const auto k = category(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
         k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC || c == 0x200C || c == 0x200D;
}

U32 normalize(const U32& text, NormalForm form) {
  if (text.empty()) return text;
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  const std::string in = utf8(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()),
                                          static_cast<utf8proc_ssize_t>(in.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) refuse(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  U32 result = utf32(std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n)));
  std::free(out);
  return result;
}

U32 lowercase(const U32& text) {
  U32 out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c == 0x130) {   // the one unconditional multi-character lower case (SpecialCasing.txt): I + COMBINING DOT
      out += U"i\u0307";
      continue;
    }
    out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}

std::vector<U32> graphemes(const U32& text) {
  std::vector<U32> out;
  utf8proc_int32_t state = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == 0 || utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(text[i - 1]),
                                                    static_cast<utf8proc_int32_t>(text[i]), &state)) {
      out.emplace_back();
    }
    out.back().push_back(text[i]);
  }
  return out;
}

}  // namespace ditskip::text
