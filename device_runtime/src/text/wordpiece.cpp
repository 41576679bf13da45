// MiniLM's vocab.txt as `tokenizers`' BertWordPieceTokenizer(vocab.txt, lowercase=True) runs it (what the model's
// tokenizer.json says; the host encodes its conditioning with that tokenizer):
//   added tokens     [PAD] [UNK] [CLS] [SEP] [MASK] (those in the vocabulary) matched literally first
//   BertNormalizer   clean text (drop NUL, U+FFFD and other (C*) characters but tab/newline/CR; White_Space -> " "),
//                    space out CJK ideographs, strip accents (NFD, drop Mn), lower-case
//   BertPreTokenizer split on White_Space; every punctuation character (ASCII punctuation or P*) a word of its own
//   WordPiece        greedy longest match, continuation pieces prefixed "##"; a word with no match, or longer than
//                    100 characters, is [UNK]
//   template         [CLS] pieces [SEP]: pieces cut to max_len - 2, padded with [PAD]; attention mask 1 on tokens
#include <unordered_map>

#include "text/added_tokens.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "util/failure.h"
#include "util/files.h"

namespace ditskip::text {

namespace {

constexpr size_t MAX_WORD_CHARS = 100;
constexpr char32_t CJK_RANGES[][2] = {{0x4E00, 0x9FFF}, {0x3400, 0x4DBF}, {0x20000, 0x2A6DF}, {0x2A700, 0x2B73F},
                                      {0x2B740, 0x2B81F}, {0x2B820, 0x2CEAF}, {0xF900, 0xFAFF}, {0x2F800, 0x2FA1F}};

bool is_cjk(char32_t c) {
  for (const auto& r : CJK_RANGES)
    if (c >= r[0] && c <= r[1]) return true;
  return false;
}

bool is_bert_punctuation(char32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126) ||
         is_punctuation(c);
}

U32 bert_normalize(const U32& text) {
  U32 cleaned;
  for (char32_t c : text) {
    const bool keep_control = c == U'\t' || c == U'\n' || c == U'\r';
    if (c == 0 || c == 0xFFFD || (is_other(c) && !keep_control)) continue;
    if (keep_control || is_space(c)) cleaned.push_back(U' ');
    else if (is_cjk(c)) cleaned += U32{U' ', c, U' '};
    else cleaned.push_back(c);
  }
  U32 stripped;
  for (char32_t c : normalize(cleaned, NormalForm::NFD))
    if (!is_nonspacing_mark(c)) stripped.push_back(c);
  return lowercase(stripped);
}

class WordPiece : public Tokenizer {
 public:
  WordPiece(const std::string& path, int max_len) : max_len_(max_len) {
    const std::string text = read_text(path);
    size_t start = 0;
    int64_t line = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      size_t stop = end;
      while (stop > start && (text[stop - 1] == '\r' || text[stop - 1] == ' ' || text[stop - 1] == '\t')) --stop;
      vocab_[utf32(text.substr(start, stop - start))] = line++;
      start = end + 1;
    }
    const auto id = [&](const char32_t* name) {
      const auto it = vocab_.find(name);
      if (it == vocab_.end()) refuse(path + ": " + utf8(U32(name)) + " is not in the vocabulary");
      return it->second;
    };
    unk_ = id(U"[UNK]"), cls_ = id(U"[CLS]"), sep_ = id(U"[SEP]"), pad_ = id(U"[PAD]");
    if (max_len_ < 2) refuse("max_len " + std::to_string(max_len) + " leaves no room for [CLS] and [SEP]");
    std::vector<AddedToken> specials;
    for (const char32_t* name : {U"[PAD]", U"[UNK]", U"[CLS]", U"[SEP]", U"[MASK]"}) {
      const auto it = vocab_.find(name);
      if (it != vocab_.end()) specials.push_back(AddedToken{name, it->second});
    }
    specials_ = AddedTokens(specials);
  }

  Encoding encode(const std::string& utf8_text) const override {
    const std::vector<int64_t> ids = token_ids(utf32(utf8_text));
    Encoding e;
    e.input_ids.push_back(cls_);
    e.input_ids.insert(e.input_ids.end(), ids.begin(),
                       ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), static_cast<size_t>(max_len_ - 2))));
    e.input_ids.push_back(sep_);
    e.attention_mask.assign(e.input_ids.size(), 1);
    e.input_ids.resize(static_cast<size_t>(max_len_), pad_);
    e.attention_mask.resize(static_cast<size_t>(max_len_), 0);
    return e;
  }

  int64_t count_tokens(const std::string& utf8_text) const override {
    return static_cast<int64_t>(token_ids(utf32(utf8_text)).size()) + 2;
  }

  int max_len() const override { return max_len_; }

 private:
  int max_len_;
  std::unordered_map<U32, int64_t> vocab_;
  int64_t unk_ = 0, cls_ = 0, sep_ = 0, pad_ = 0;
  AddedTokens specials_;

  void pieces(const U32& word, std::vector<int64_t>& out) const {
    if (word.size() > MAX_WORD_CHARS) {
      out.push_back(unk_);
      return;
    }
    std::vector<int64_t> ids;
    size_t start = 0;
    while (start < word.size()) {
      size_t end = word.size();
      int64_t found = -1;
      while (start < end) {
        const U32 piece = (start > 0 ? U32(U"##") : U32()) + word.substr(start, end - start);
        const auto it = vocab_.find(piece);
        if (it != vocab_.end()) {
          found = it->second;
          break;
        }
        --end;
      }
      if (found < 0) {
        out.push_back(unk_);
        return;
      }
      ids.push_back(found);
      start = end;
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // The prompt's pieces without [CLS]/[SEP] or padding.
  std::vector<int64_t> token_ids(const U32& text) const {
    std::vector<int64_t> ids;
    for (const Split& s : specials_.split(text)) {
      if (s.id) {
        ids.push_back(*s.id);
        continue;
      }
      const U32 normed = bert_normalize(text.substr(s.start, s.end - s.start));
      U32 word;
      const auto flush = [&]() {
        if (!word.empty()) pieces(word, ids), word.clear();
      };
      for (char32_t c : normed) {
        if (is_space(c)) {
          flush();
        } else if (is_bert_punctuation(c)) {
          flush();
          pieces(U32(1, c), ids);
        } else {
          word.push_back(c);
        }
      }
      flush();
    }
    return ids;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> load_wordpiece_vocab(const std::string& path, int max_len) {
  return std::make_unique<WordPiece>(path, max_len);
}

}  // namespace ditskip::text
