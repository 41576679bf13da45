// The device's tokenizers: text -> (input_ids, attention_mask) for a text encoder program, as the bundle's tokenizer
// files say. One implementation for every runtime on the phone; checked id for id against Hugging Face `tokenizers`
// (tests/test_native_tokenizer.py), which the Python runtime uses itself.
//
//   tokenizer.json (generation.text.kind "pipeline": FLUX's CLIP BPE and T5 Unigram, SANA's Gemma BPE): normalizer,
//   pre-tokenizer, model, post-processor as `tokenizers` runs them, then truncation and padding as `transformers`
//   returns them with padding="max_length", truncation=True (the diffusers pipelines' call).
//   vocab.txt (kind "minilm": BERT WordPiece, lower-cased, [CLS] ... [SEP]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ditskip::text {

struct Encoding {
  std::vector<int64_t> input_ids;       // max_len ids: the text's, cut so the special tokens fit, then padding
  std::vector<int64_t> attention_mask;  // 1 for a token of the text or a special token, 0 for padding
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual Encoding encode(const std::string& utf8) const = 0;
  // Tokens the encoder would read without truncation, special tokens included (the over-long prompt refusal).
  virtual int64_t count_tokens(const std::string& utf8) const = 0;
  virtual int max_len() const = 0;
};

// tokenizer.json; pad_id: the manifest's generation.text.encoders[].tokenizer.pad_id. Refuses (one line naming the
// file) a file that is not a tokenizer.json or uses a component this runtime does not implement.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path, int max_len, int64_t pad_id);
// MiniLM's vocab.txt (one token a line, id = line number).
std::unique_ptr<Tokenizer> load_wordpiece_vocab(const std::string& path, int max_len);

}  // namespace ditskip::text
