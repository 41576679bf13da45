// The steps of a tokenizer.json, each built from its JSON entry as `tokenizers` builds its normalizers,
// pre-tokenizers, models and post-processors: what tokenizer_json.cpp runs in `tokenizers`' order. A component
// type or setting this runtime does not implement is refused naming its path in the JSON ("normalizer.normalizers[0]:
// type 'BertNormalizer' is not supported").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/unicode.h"
#include "util/json.h"

namespace ditskip::text {

// normalizer: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Replace (String or Regex), Prepend, Strip, StripAccents,
// Precompiled (SentencePiece's charsmap, applied per grapheme cluster as `spm_precompiled` does). null: identity.
using Normalizer = std::function<U32(const U32&)>;
Normalizer build_normalizer(const json& spec, const std::string& where);

// pre_tokenizer: Sequence, Split (String or Regex; Removed / Isolated / MergedWithPrevious / MergedWithNext /
// Contiguous; invert), ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Digits. null: identity.
struct Piece {
  U32 text;
  bool first;        // starts the text (Metaspace prepend_scheme "first")
};
using PreTokenizer = std::function<std::vector<Piece>(std::vector<Piece>)>;
PreTokenizer build_pre_tokenizer(const json& spec, const std::string& where);

// (start, end, is_match) segments covering a text, and which (start, end) pieces a split behavior keeps
// (`tokenizers`' Pattern::find_matches and NormalizedString::split).
struct Segment {
  size_t start, end;
  bool match;
};
std::vector<std::pair<size_t, size_t>> split_by(std::vector<Segment> segments, const std::string& behavior,
                                                bool invert = false);
std::vector<Segment> char_segments(const U32& text, const std::function<bool(char32_t)>& is_match);

// model: BPE, Unigram, WordLevel. tokenize: one pre-tokenized word -> its ids.
class Model {
 public:
  virtual ~Model() = default;
  virtual std::vector<int64_t> tokenize(const U32& word) const = 0;
};
std::unique_ptr<Model> build_model(const json& spec, const std::string& where);

// post_processor: TemplateProcessing (one $A), RobertaProcessing, BertProcessing, ByteLevel, Sequence: the ids put
// before and after a single sequence.
struct Specials {
  std::vector<int64_t> before, after;
};
Specials build_post_processor(const json& spec, const std::string& where);

// JSON helpers shared by the builders.
std::string type_of(const json& spec);                                        // "" when absent
bool flag(const json& spec, const char* key, bool fallback);                  // null / absent: fallback
[[noreturn]] void unsupported_type(const json& spec, const std::string& where);   // "{where}: type 'X' is not supported"

}  // namespace ditskip::text
