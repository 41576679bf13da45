// The `pre_tokenizer` step (`tokenizers`' pre-tokenizers): a tokenizer.json `pre_tokenizer`
// entry -> a function over pieces, each piece one word for the model. The splitting helpers are `tokenizers`'
// Pattern::find_matches and NormalizedString::split.
#include <algorithm>

#include "text/components.h"
#include "text/regex.h"
#include "util/failure.h"

namespace ditskip::text {

namespace {

const char* GPT2_SPLIT = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::vector<Segment> regex_segments(const Regex& regex, const U32& text) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<Segment> segs;
  size_t prev = 0;
  for (const auto& [a, b] : regex.find_all(text)) {
    if (prev != a) segs.push_back({prev, a, false});
    segs.push_back({a, b, true});
    prev = b;
  }
  if (prev != text.size()) segs.push_back({prev, text.size(), false});
  return segs;
}

// GPT-2's reversible byte -> printable character table (ByteLevel).
std::vector<char32_t> bytes_to_unicode() {
  std::vector<char32_t> table(256, 0);
  std::vector<bool> kept(256, false);
  for (int b = 0; b < 256; ++b)
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) table[b] = b, kept[b] = true;
  char32_t n = 0;
  for (int b = 0; b < 256; ++b)
    if (!kept[b]) table[b] = 256 + n++;
  return table;
}

// Lifts `text -> (start, end) pieces` to a pre-tokenizer over pieces; empty pieces are dropped.
template <class SplitOne>
PreTokenizer splitter(SplitOne split_one) {
  return [split_one](std::vector<Piece> pieces) {
    std::vector<Piece> out;
    for (const Piece& p : pieces)
      for (const auto& [a, b] : split_one(p.text))
        if (b > a) out.push_back({p.text.substr(a, b - a), p.first && a == 0});
    return out;
  };
}

PreTokenizer byte_level(const json& spec) {
  const bool add_prefix_space = flag(spec, "add_prefix_space", true), use_regex = flag(spec, "use_regex", true);
  const auto regex = std::make_shared<Regex>(GPT2_SPLIT, "ByteLevel");
  const auto table = std::make_shared<std::vector<char32_t>>(bytes_to_unicode());
  return [=](std::vector<Piece> pieces) {
    std::vector<Piece> out;
    for (Piece& p : pieces) {
      U32 text = p.text;
      if (add_prefix_space && (text.empty() || text[0] != U' ')) text = U" " + text;
      const auto spans = use_regex ? split_by(regex_segments(*regex, text), "Isolated")
                                   : std::vector<std::pair<size_t, size_t>>{{0, text.size()}};
      for (const auto& [a, b] : spans) {
        if (b <= a) continue;
        U32 mapped;
        for (unsigned char byte : utf8(text.substr(a, b - a))) mapped.push_back((*table)[byte]);
        out.push_back({mapped, p.first && a == 0});
      }
    }
    return out;
  };
}

PreTokenizer metaspace(const json& spec, const std::string& where) {
  const U32 repl = spec.contains("replacement") ? utf32(spec["replacement"].get<std::string>()) : U32(U"\u2581");
  if (repl.size() != 1) refuse(where + ": replacement " + py_repr(spec["replacement"]) + " is not one character");
  std::string scheme = spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()
                           ? spec["prepend_scheme"].get<std::string>() : "always";
  if (spec.contains("add_prefix_space") && spec["add_prefix_space"].is_boolean() && !spec["add_prefix_space"].get<bool>())
    scheme = "never";
  if (scheme != "always" && scheme != "first" && scheme != "never")
    refuse(where + ": prepend_scheme " + py_repr(json(scheme)) + " is not supported");
  const bool split = flag(spec, "split", true);
  const char32_t r = repl[0];
  return [=](std::vector<Piece> pieces) {
    std::vector<Piece> out;
    for (Piece& p : pieces) {
      U32 text = p.text;
      for (char32_t& c : text)
        if (c == U' ') c = r;
      if ((text.empty() || text[0] != r) && (scheme == "always" || (scheme == "first" && p.first))) text = repl + text;
      const auto spans = split ? split_by(char_segments(text, [r](char32_t c) { return c == r; }), "MergedWithNext")
                               : std::vector<std::pair<size_t, size_t>>{{0, text.size()}};
      for (const auto& [a, b] : spans)
        if (b > a) out.push_back({text.substr(a, b - a), p.first && a == 0});
    }
    return out;
  };
}

const char* const BEHAVIORS[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};

}  // namespace

std::vector<Segment> char_segments(const U32& text, const std::function<bool(char32_t)>& is_match) {
  std::vector<Segment> segs;
  size_t last = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!is_match(text[i])) continue;
    if (last < i) segs.push_back({last, i, false});
    segs.push_back({i, i + 1, true});
    last = i + 1;
  }
  if (last < text.size()) segs.push_back({last, text.size(), false});
  return segs;
}

std::vector<std::pair<size_t, size_t>> split_by(std::vector<Segment> segs, const std::string& behavior, bool invert) {
  for (auto& s : segs) s.match = s.match != invert;
  std::vector<std::pair<size_t, size_t>> acc;
  if (behavior == "Removed") {
    for (const auto& s : segs)
      if (!s.match) acc.emplace_back(s.start, s.end);
    return acc;
  }
  if (behavior == "Isolated") {
    for (const auto& s : segs) acc.emplace_back(s.start, s.end);
    return acc;
  }
  bool prev = false;
  if (behavior == "Contiguous") {
    for (const auto& s : segs) {
      if (s.match == prev && !acc.empty()) acc.back().second = s.end;
      else acc.emplace_back(s.start, s.end);
      prev = s.match;
    }
  } else if (behavior == "MergedWithPrevious") {
    for (const auto& s : segs) {
      if (s.match && !prev && !acc.empty()) acc.back().second = s.end;
      else acc.emplace_back(s.start, s.end);
      prev = s.match;
    }
  } else if (behavior == "MergedWithNext") {
    for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
      if (it->match && !prev && !acc.empty()) acc.back().first = it->start;
      else acc.emplace_back(it->start, it->end);
      prev = it->match;
    }
    std::reverse(acc.begin(), acc.end());
  } else {
    refuse("split behavior " + py_repr(json(behavior)) + " is not supported");
  }
  return acc;
}

PreTokenizer build_pre_tokenizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return [](std::vector<Piece> pieces) { return pieces; };
  const std::string kind = type_of(spec);
  if (kind == "Sequence") {
    std::vector<PreTokenizer> steps;
    const json& list = spec.at("pretokenizers");
    for (size_t i = 0; i < list.size(); ++i)
      steps.push_back(build_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]"));
    return [steps](std::vector<Piece> pieces) {
      for (const auto& step : steps) pieces = step(std::move(pieces));
      return pieces;
    };
  }
  if (kind == "Split") {
    const json& p = spec.at("pattern");
    std::shared_ptr<Regex> regex;
    if (p.contains("String")) regex = std::make_shared<Regex>(Regex::literal(utf32(p["String"].get<std::string>())));
    else if (p.contains("Regex")) regex = std::make_shared<Regex>(p["Regex"].get<std::string>(), where);
    else refuse(where + ": pattern " + py_repr(p) + " is neither String nor Regex");
    const std::string behavior = spec.at("behavior").get<std::string>();
    if (std::find(std::begin(BEHAVIORS), std::end(BEHAVIORS), behavior) == std::end(BEHAVIORS))
      refuse(where + ": behavior " + py_repr(json(behavior)) + " is not supported");
    const bool invert = flag(spec, "invert", false);
    return splitter([=](const U32& t) { return split_by(regex_segments(*regex, t), behavior, invert); });
  }
  if (kind == "ByteLevel") return byte_level(spec);
  if (kind == "Metaspace") return metaspace(spec, where);
  if (kind == "Whitespace") {
    const auto regex = std::make_shared<Regex>(R"(\w+|[^\w\s]+)", where);
    return splitter([=](const U32& t) { return split_by(regex_segments(*regex, t), "Removed", true); });
  }
  if (kind == "WhitespaceSplit")
    return splitter([](const U32& t) { return split_by(char_segments(t, is_space), "Removed"); });
  if (kind == "Digits") {
    const std::string behavior = flag(spec, "individual_digits", false) ? "Isolated" : "Contiguous";
    return splitter([=](const U32& t) { return split_by(char_segments(t, is_number), behavior); });
  }
  unsupported_type(spec, where);
}

}  // namespace ditskip::text
