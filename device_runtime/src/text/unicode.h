// Unicode for the tokenizers (utf8proc): text as code points, the character classes `tokenizers` and its regexes
// use, normalization forms, per-character lower-casing, grapheme clusters: what `tokenizers` takes from Rust's
// Unicode crates and Oniguruma. utf8proc's Unicode version (15 in Debian's 2.8) answers as `tokenizers` does on the
// tested corpus (tests/test_native_tokenizer.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ditskip::text {

using U32 = std::u32string;

U32 utf32(const std::string& utf8);           // refuses text that is not UTF-8
std::string utf8(const U32& text);
std::string utf8(char32_t c);

bool is_letter(char32_t c);                   // \p{L}: Lu Ll Lt Lm Lo
bool is_number(char32_t c);                   // \p{N}: Nd Nl No (Rust's char::is_numeric)
bool is_decimal(char32_t c);                  // \d: Nd
bool is_mark(char32_t c);                     // Mn Mc Me
bool is_nonspacing_mark(char32_t c);          // Mn
bool is_punctuation(char32_t c);              // P*
bool is_other(char32_t c);                    // C*: Cc Cf Cs Co Cn
bool is_space(char32_t c);                    // the White_Space property (Rust's char::is_whitespace, Oniguruma \s)
bool is_word_char(char32_t c);                // \w: L, M, Nd, Nl, Pc, ZWNJ, ZWJ

enum class NormalForm { NFC, NFD, NFKC, NFKD };
U32 normalize(const U32& text, NormalForm form);
U32 lowercase(const U32& text);               // each character's full lower case (Rust char::to_lowercase)
std::vector<U32> graphemes(const U32& text);  // extended grapheme clusters (UAX #29)

}  // namespace ditskip::text
