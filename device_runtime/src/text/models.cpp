// The `model` step (`tokenizers`' models): BPE, Unigram, WordLevel, word -> ids.
//   BPE        merges lowest rank first, leftmost on ties (a heap over a linked list of symbols, as `tokenizers`'
//              Word::merge_all); continuing_subword_prefix, end_of_word_suffix, unk with fuse_unk, byte_fallback to
//              "<0xNN>", ignore_merges; dropout other than 0 is refused
//   Unigram    Viterbi over piece scores, ties to the earlier and shorter piece; a character no piece covers is unk
//              with score min - 10; consecutive unks fused; byte_fallback
//   WordLevel  the word's id, else unk
#include <cstdio>
#include <queue>
#include <tuple>

#include "text/components.h"
#include "util/failure.h"

namespace ditskip::text {

namespace {

constexpr double UNIGRAM_UNK_PENALTY = 10.0;   // unk score = lowest piece score - this (as SentencePiece)

using Vocab = std::unordered_map<U32, int64_t>;

Vocab read_vocab(const json& v, const std::string& where) {
  if (!v.is_object()) refuse(where + ".vocab: expected an object of token -> id");
  Vocab out;
  for (const auto& [k, id] : v.items()) out[utf32(k)] = id.get<int64_t>();
  return out;
}

U32 byte_token(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return utf32(buf);
}

// The "<0xNN>" ids of a text's UTF-8 bytes; false when one is missing from the vocabulary.
bool byte_fallback_ids(const U32& text, const Vocab& vocab, std::vector<int64_t>& out) {
  std::vector<int64_t> ids;
  for (unsigned char b : utf8(text)) {
    const auto it = vocab.find(byte_token(b));
    if (it == vocab.end()) return false;
    ids.push_back(it->second);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  return true;
}

class Bpe : public Model {
 public:
  Bpe(const json& spec, const std::string& where) {
    if (spec.contains("dropout") && !spec["dropout"].is_null() && spec["dropout"].get<double>() != 0.0)
      refuse(where + ": BPE dropout " + py_repr(spec["dropout"]) + " is not supported (sampling, not a function)");
    vocab_ = read_vocab(spec.at("vocab"), where);
    if (spec.contains("unk_token") && spec["unk_token"].is_string()) unk_ = utf32(spec["unk_token"].get<std::string>());
    if (spec.contains("continuing_subword_prefix") && spec["continuing_subword_prefix"].is_string())
      prefix_ = utf32(spec["continuing_subword_prefix"].get<std::string>());
    if (spec.contains("end_of_word_suffix") && spec["end_of_word_suffix"].is_string())
      suffix_ = utf32(spec["end_of_word_suffix"].get<std::string>());
    fuse_unk_ = flag(spec, "fuse_unk", false);
    byte_fallback_ = flag(spec, "byte_fallback", false);
    ignore_merges_ = flag(spec, "ignore_merges", false);
    const size_t cut = prefix_ ? prefix_->size() : 0;
    const json merges = spec.contains("merges") ? spec["merges"] : json::array();
    int64_t rank = 0;
    for (const auto& m : merges) {
      U32 left, right;
      if (m.is_string()) {
        const U32 both = utf32(m.get<std::string>());
        const size_t space = both.find(U' ');
        if (space == U32::npos) refuse(where + ".merges[" + std::to_string(rank) + "]: expected 'left right'");
        left = both.substr(0, space), right = both.substr(space + 1);
      } else {
        left = utf32(m.at(0).get<std::string>()), right = utf32(m.at(1).get<std::string>());
      }
      const auto missing = [&](const U32& t) {
        refuse(where + ".merges[" + std::to_string(rank) + "]: " + py_repr(json(utf8(t))) + " is not in the vocabulary");
      };
      const auto l = vocab_.find(left), r = vocab_.find(right);
      if (l == vocab_.end()) missing(left);
      if (r == vocab_.end()) missing(right);
      const U32 joined = left + (right.size() > cut ? right.substr(cut) : U32());
      const auto j = vocab_.find(joined);
      if (j == vocab_.end()) missing(joined);
      merges_.emplace(key(l->second, r->second), std::make_pair(rank, j->second));
      ++rank;
    }
  }

  std::vector<int64_t> tokenize(const U32& word) const override {
    if (word.empty()) return {};
    if (ignore_merges_) {
      const auto it = vocab_.find(word);
      if (it != vocab_.end()) return {it->second};
    }
    return merge(symbols(word));
  }

 private:
  Vocab vocab_;
  std::optional<U32> unk_, prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges_;   // (left, right) -> (rank, merged id)

  static uint64_t key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) ^ static_cast<uint64_t>(b); }

  const std::pair<int64_t, int64_t>* find_merge(int64_t a, int64_t b) const {
    const auto it = merges_.find(key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  int64_t unk_id() const {
    const auto it = vocab_.find(*unk_);
    if (it == vocab_.end()) refuse("model: unk_token " + py_repr(json(utf8(*unk_))) + " is not in the vocabulary");
    return it->second;
  }

  // One id per character (prefix / suffix added), byte-fallback ids, or unk (fused when fuse_unk).
  std::vector<int64_t> symbols(const U32& word) const {
    std::vector<int64_t> ids;
    bool unk_pending = false;
    for (size_t i = 0; i < word.size(); ++i) {
      U32 s(1, word[i]);
      if (i > 0 && prefix_) s = *prefix_ + s;
      if (i + 1 == word.size() && suffix_) s += *suffix_;
      const auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        if (unk_pending) ids.push_back(unk_id()), unk_pending = false;
        ids.push_back(it->second);
        continue;
      }
      if (byte_fallback_ && byte_fallback_ids(s, vocab_, ids)) continue;   // a pending unk stays pending
      if (unk_) {
        if (unk_pending && !fuse_unk_) ids.push_back(unk_id());
        unk_id();
        unk_pending = true;
      }
    }
    if (unk_pending) ids.push_back(unk_id());
    return ids;
  }

  std::vector<int64_t> merge(std::vector<int64_t> ids) const {
    const size_t n = ids.size();
    std::vector<size_t> nxt(n), prv(n);
    std::vector<bool> alive(n, true);
    for (size_t i = 0; i < n; ++i) nxt[i] = i + 1, prv[i] = i - 1;   // prv[0] wraps: "none"
    using Entry = std::tuple<int64_t, size_t, int64_t>;           // (rank, position, merged id): a min-heap
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    for (size_t i = 0; i + 1 < n; ++i)
      if (const auto* m = find_merge(ids[i], ids[i + 1])) heap.emplace(m->first, i, m->second);
    while (!heap.empty()) {
      const auto [rank, i, merged] = heap.top();
      heap.pop();
      const size_t j = nxt[i];
      if (!alive[i] || j >= n) continue;
      const auto* m = find_merge(ids[i], ids[j]);
      if (!m || m->second != merged) continue;
      ids[i] = merged, alive[j] = false;
      nxt[i] = nxt[j];
      if (nxt[i] < n) prv[nxt[i]] = i;
      const size_t pairs[2][2] = {{prv[i], i}, {i, nxt[i]}};
      for (const auto& p : pairs) {
        if (p[0] < n && p[1] < n)
          if (const auto* m2 = find_merge(ids[p[0]], ids[p[1]])) heap.emplace(m2->first, p[0], m2->second);
      }
    }
    std::vector<int64_t> out;
    for (size_t i = 0; i < n; ++i)
      if (alive[i]) out.push_back(ids[i]);
    return out;
  }
};

class Unigram : public Model {
 public:
  Unigram(const json& spec, const std::string& where) {
    const json& pieces = spec.at("vocab");
    for (size_t i = 0; i < pieces.size(); ++i) {
      const U32 piece = utf32(pieces[i].at(0).get<std::string>());
      scores_.push_back(pieces[i].at(1).get<double>());
      ids_[piece] = static_cast<int64_t>(i);                  // a repeated piece: the last id
      max_piece_chars_ = std::max(max_piece_chars_, piece.size());
    }
    if (scores_.empty()) refuse(where + ": the Unigram vocabulary is empty");
    if (spec.contains("unk_id") && !spec["unk_id"].is_null()) {
      unk_id_ = spec["unk_id"].get<int64_t>();
      if (*unk_id_ < 0 || *unk_id_ >= static_cast<int64_t>(scores_.size()))
        refuse(where + ": unk_id " + std::to_string(*unk_id_) + " is outside the vocabulary of " +
               std::to_string(scores_.size()));
    }
    byte_fallback_ = flag(spec, "byte_fallback", false);
    unk_score_ = *std::min_element(scores_.begin(), scores_.end()) - UNIGRAM_UNK_PENALTY;
  }

  std::vector<int64_t> tokenize(const U32& word) const override {
    std::vector<int64_t> out;
    if (word.empty()) return out;
    for (const U32& piece : viterbi(word)) {
      const auto it = ids_.find(piece);
      if (it == ids_.end() && byte_fallback_ && byte_fallback_ids(piece, ids_, out)) continue;
      out.push_back(it == ids_.end() ? *unk_id_ : it->second);
    }
    return out;
  }

 private:
  std::vector<double> scores_;
  Vocab ids_;
  std::optional<int64_t> unk_id_;
  bool byte_fallback_ = false;
  double unk_score_ = 0;
  size_t max_piece_chars_ = 0;

  // Best segmentation (highest total score); ties keep the first candidate seen (earlier start, then shorter
  // piece); characters no piece covers are unk; runs of unk come back fused.
  std::vector<U32> viterbi(const U32& text) const {
    struct Best {
      bool set = false;
      double score = 0;
      size_t start = 0;
      int64_t id = -1;
    };
    const size_t n = text.size();
    std::vector<Best> best(n + 1);
    best[0] = {true, 0.0, 0, -1};
    for (size_t start = 0; start < n; ++start) {
      const double base = best[start].score;
      bool single = false;
      for (size_t end = start + 1; end <= std::min(n, start + max_piece_chars_); ++end) {
        const auto it = ids_.find(text.substr(start, end - start));
        if (it == ids_.end()) continue;
        const double cand = base + scores_[static_cast<size_t>(it->second)];
        if (!best[end].set || cand > best[end].score) best[end] = {true, cand, start, it->second};
        single = single || end == start + 1;
      }
      if (!single) {
        if (!unk_id_) refuse("model: no piece covers " + py_repr(json(utf8(text[start]))) + " and the Unigram has no unk_id");
        const double cand = base + unk_score_;
        if (!best[start + 1].set || cand > best[start + 1].score) best[start + 1] = {true, cand, start, *unk_id_};
      }
    }
    std::vector<U32> pieces;
    U32 unk_run;
    bool in_unk = false;
    for (size_t end = n; end > 0;) {
      const Best& b = best[end];
      const U32 piece = text.substr(b.start, end - b.start);
      if (unk_id_ && b.id == *unk_id_) {
        unk_run = piece + unk_run, in_unk = true;
      } else {
        if (in_unk) pieces.push_back(unk_run), unk_run.clear(), in_unk = false;
        pieces.push_back(piece);
      }
      end = b.start;
    }
    if (in_unk) pieces.push_back(unk_run);
    return {pieces.rbegin(), pieces.rend()};
  }
};

class WordLevel : public Model {
 public:
  WordLevel(const json& spec, const std::string& where) : vocab_(read_vocab(spec.at("vocab"), where)) {
    if (spec.contains("unk_token") && spec["unk_token"].is_string()) unk_ = spec["unk_token"].get<std::string>();
  }

  std::vector<int64_t> tokenize(const U32& word) const override {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) return {it->second};
    it = vocab_.find(utf32(unk_));
    if (it != vocab_.end()) return {it->second};
    refuse("model: " + py_repr(json(utf8(word))) + " is not in the WordLevel vocabulary and unk_token " +
           py_repr(json(unk_)) + " is missing");
  }

 private:
  Vocab vocab_;
  std::string unk_;
};

}  // namespace

std::unique_ptr<Model> build_model(const json& spec, const std::string& where) {
  std::string kind = type_of(spec);
  if (kind.empty() && spec.contains("merges")) kind = "BPE";   // very old files leave out the BPE type
  if (kind == "BPE") return std::make_unique<Bpe>(spec, where);
  if (kind == "Unigram") return std::make_unique<Unigram>(spec, where);
  if (kind == "WordLevel") return std::make_unique<WordLevel>(spec, where);
  unsupported_type(spec, where);
}

}  // namespace ditskip::text
