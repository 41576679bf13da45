#include "text/added_tokens.h"

#include <algorithm>

namespace ditskip::text {

AddedTokens::AddedTokens(std::vector<AddedToken> tokens) {
  for (auto& t : tokens) {
    if (t.content.empty()) continue;
    const auto same = std::find_if(tokens_.begin(), tokens_.end(), [&](const AddedToken& o) { return o.content == t.content; });
    if (same != tokens_.end()) *same = t;
    else tokens_.push_back(t);
  }
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
}

std::vector<Split> AddedTokens::split(const U32& text) const {
  if (tokens_.empty() || text.empty()) return {{0, text.size(), std::nullopt}};
  std::vector<Split> out;
  size_t done = 0, pos = 0;
  while (pos < text.size()) {
    const AddedToken* hit = nullptr;
    for (const auto& t : tokens_)
      if (text.compare(pos, t.content.size(), t.content) == 0) { hit = &t; break; }
    if (!hit) { ++pos; continue; }
    size_t start = pos, stop = pos + hit->content.size();
    pos = stop;                                  // the next search starts after the match, as re.finditer's
    if (hit->single_word && ((start > 0 && is_word_char(text[start - 1])) || (stop < text.size() && is_word_char(text[stop]))))
      continue;
    if (hit->lstrip) {
      size_t left = start;
      while (left > 0 && is_space(text[left - 1])) --left;
      start = std::max(left, done);
    }
    if (hit->rstrip)
      while (stop < text.size() && is_space(text[stop])) ++stop;
    if (done < start) out.push_back({done, start, std::nullopt});
    out.push_back({start, stop, hit->id});
    done = stop;
  }
  if (done != text.size()) out.push_back({done, text.size(), std::nullopt});
  return out;
}

}  // namespace ditskip::text
