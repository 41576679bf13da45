// The built-in tiny models' "hash" text encoder (ditskip_edge/runtime/hash_text.py), bit for bit: each lower-cased
// word ([a-z0-9]+ runs of Python's str.lower()) -> rng.normal(first 8 bytes of SHA-256(word) LE & (2^63 - 1), d),
// plus fixed positional vectors rng.normal(1234, (L, d)) * 0.1; FLUX: pooled = the float32 mean of the words'
// pooled_d vectors; SANA: txt_mask.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "generate/floats.h"

namespace ditskip::generate::hash_text {

std::vector<std::string> words(const std::string& utf8_prompt);
inline int64_t count_tokens(const std::string& utf8_prompt) { return int64_t(words(utf8_prompt).size()); }
uint64_t word_seed(const std::string& word);
// {"cond.txt" [1, L, d], "cond.pooled" [1, pooled_d] (arch "flux") | "cond.txt_mask" [1, L]}
NamedFloats encode(const std::string& utf8_prompt, const std::string& arch, int seq_len, int dim, int pooled_dim);

}  // namespace ditskip::generate::hash_text
