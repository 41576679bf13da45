// The `added_tokens` step, first of all (`tokenizers`' AddedVocabulary): tokens found literally in
// the text become whole tokens, leftmost-longest: normalized=false ones in the raw text, then normalized=true ones
// (their normalized form) in the normalized text of what is left; lstrip / rstrip / single_word as `tokenizers`
// applies them. WordPiece (vocab.txt) uses it for BERT's special tokens, as `tokenizers`' BertWordPieceTokenizer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/unicode.h"

namespace ditskip::text {

struct AddedToken {
  U32 content;                 // as matched (the normalized form for a normalized token)
  int64_t id = 0;
  bool lstrip = false, rstrip = false, single_word = false;
};

struct Split {
  size_t start, end;
  std::optional<int64_t> id;   // a matched token, or nullopt for text between tokens
};

class AddedTokens {
 public:
  AddedTokens() = default;
  explicit AddedTokens(std::vector<AddedToken> tokens);   // a later token with the same content replaces an earlier one
  // (start, end, id or none) covering text.
  std::vector<Split> split(const U32& text) const;
  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<AddedToken> tokens_;   // longest first
};

}  // namespace ditskip::text
