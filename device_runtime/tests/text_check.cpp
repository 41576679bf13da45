// text_check: the core's tokenizers (src/text) behind a command line, for tests/test_native_tokenizer.py to compare
// with Hugging Face `tokenizers` / `transformers`. A refusal goes to stderr as one line, exit code = its status.
//
//   text_check FILE json MAX_LEN PAD_ID      FILE is a tokenizer.json (generation.text.kind "pipeline")
//   text_check FILE wordpiece MAX_LEN        FILE is a vocab.txt (kind "minilm")
//
// stdin: one prompt a line, each a JSON string; stdout: one line a prompt, {"ids": [...], "mask": [...], "count": N}
// (count: count_tokens, the untruncated length with special tokens).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "text/tokenizer.h"
#include "util/failure.h"
#include "util/json.h"

using namespace ditskip;

namespace {

int run(int argc, char** argv) {
  if (argc < 4) refuse("usage: text_check FILE json MAX_LEN PAD_ID | text_check FILE wordpiece MAX_LEN");
  const std::string path = argv[1], kind = argv[2];
  const int max_len = std::atoi(argv[3]);
  std::unique_ptr<text::Tokenizer> tok;
  if (kind == "json") {
    if (argc < 5) refuse("text_check FILE json MAX_LEN PAD_ID: missing PAD_ID");
    tok = text::load_tokenizer_json(path, max_len, std::strtoll(argv[4], nullptr, 10));
  } else if (kind == "wordpiece") {
    tok = text::load_wordpiece_vocab(path, max_len);
  } else {
    refuse("text_check: kind " + kind + ": expected json or wordpiece");
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    const std::string prompt = parse_json(line, "stdin").get<std::string>();
    const text::Encoding e = tok->encode(prompt);
    const json out{{"ids", e.input_ids}, {"mask", e.attention_mask}, {"count", tok->count_tokens(prompt)}};
    const std::string s = out.dump();
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Failure& f) {
    std::fprintf(stderr, "%s\n", f.what());
    return static_cast<int>(f.status());
  } catch (const std::exception& e) {   // a bug: no other exception may leave the data layer
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 70;
  }
}
