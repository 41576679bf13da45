// The regexes of tokenizer.json files (Split / Replace patterns, ByteLevel's GPT-2 split): Oniguruma's Ruby syntax,
// run by a small backtracking matcher over code points with Perl's leftmost-first semantics (what `tokenizers` gets
// from Oniguruma).
//
// Supported: literals and escapes (\n \t \r \f \v \e \a \xHH \x{H..} \uHHHH, escaped punctuation), . ^ $ \A \z \Z
// \b \B, classes [...] with ranges and negation, \s \S \w \W \d \D \p{L} \p{N} (\p{Letter}, \p{Number}, \P{..},
// \p{^..}) in and out of classes, groups (...) (?:...) (?<name>...), lookahead (?=...) (?!...), alternation, greedy
// and lazy * + ? {n} {n,} {n,m}. Anything else is refused naming the JSON path ("pre_tokenizer: regex '...': \p{Han}
// is not supported"). Classes: \s is White_Space, \w L, M, Nd, Nl, Pc, ZWNJ, ZWJ, \d Nd.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/unicode.h"

namespace ditskip::text {

class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where);
  static Regex literal(const U32& text);                       // a Split / Replace {"String": ...} pattern
  // Non-overlapping leftmost-first matches [start, end) from left to right; empty matches are skipped.
  std::vector<std::pair<size_t, size_t>> find_all(const U32& text) const;
  struct Node;

 private:
  Regex() = default;
  std::shared_ptr<const Node> root_;
};

}  // namespace ditskip::text
