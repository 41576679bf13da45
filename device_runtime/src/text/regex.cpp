#include "text/regex.h"

#include <cctype>

#include "util/failure.h"
#include "util/json.h"

namespace ditskip::text {

namespace {

enum class Kind { Seq, Alt, Char, Class, Any, Repeat, Look, LineStart, LineEnd, TextStart, TextEnd, TextEndNewline,
                  WordBoundary, NotWordBoundary };
enum class Named { Range, Letter, Number, Decimal, Space, Word };

struct ClassItem {
  Named kind = Named::Range;
  bool negated = false;         // \S \W \D \P{..} inside a class
  char32_t lo = 0, hi = 0;
};

bool named_has(Named k, char32_t c) {
  switch (k) {
    case Named::Letter: return is_letter(c);
    case Named::Number: return is_number(c);
    case Named::Decimal: return is_decimal(c);
    case Named::Space: return is_space(c);
    case Named::Word: return is_word_char(c);
    case Named::Range: break;
  }
  return false;
}

}  // namespace

struct Regex::Node {
  Kind kind = Kind::Seq;
  std::vector<Node> kids;
  std::vector<ClassItem> items;   // Class
  bool negated = false;           // Class [^...], Look (?!...)
  char32_t ch = 0;                // Char
  int min = 0, max = -1;          // Repeat; max -1: no bound
  bool greedy = true;

  bool single() const { return kind == Kind::Char || kind == Kind::Class || kind == Kind::Any; }
  bool has(char32_t c) const {
    if (kind == Kind::Char) return c == ch;
    if (kind == Kind::Any) return c != U'\n';
    bool in = false;
    for (const auto& it : items) {
      const bool hit = it.kind == Named::Range ? (c >= it.lo && c <= it.hi) : named_has(it.kind, c) != it.negated;
      if (hit) { in = true; break; }
    }
    return in != negated;
  }
};

namespace {

using Node = Regex::Node;

class Parser {
 public:
  Parser(const std::string& pattern, const std::string& where) : p_(utf32(pattern)), pattern_(pattern), where_(where) {}

  Node parse() {
    Node n = alternation();
    if (i_ < p_.size()) fail("an unmatched ')'");
    return n;
  }

 private:
  U32 p_;
  size_t i_ = 0;
  std::string pattern_, where_;

  [[noreturn]] void fail(const std::string& what) const {
    refuse(where_ + ": regex " + py_repr(json(pattern_)) + ": " + what + " is not supported");
  }
  bool at(char32_t c) const { return i_ < p_.size() && p_[i_] == c; }
  bool at(const char32_t* s) const { return p_.compare(i_, std::char_traits<char32_t>::length(s), s) == 0; }

  Node alternation() {
    Node alt;
    alt.kind = Kind::Alt;
    alt.kids.push_back(sequence());
    while (at(U'|')) {
      ++i_;
      alt.kids.push_back(sequence());
    }
    return alt.kids.size() == 1 ? std::move(alt.kids[0]) : alt;
  }

  Node sequence() {
    Node seq;
    seq.kind = Kind::Seq;
    while (i_ < p_.size() && !at(U'|') && !at(U')')) {
      Node a = atom();
      while (quantifier(a)) {}
      seq.kids.push_back(std::move(a));
    }
    return seq;
  }

  bool number(int& out) {
    const size_t start = i_;
    out = 0;
    while (i_ < p_.size() && p_[i_] >= U'0' && p_[i_] <= U'9') out = out * 10 + static_cast<int>(p_[i_++] - U'0');
    return i_ > start;
  }

  bool quantifier(Node& a) {
    if (i_ >= p_.size()) return false;
    int lo = 0, hi = -1;
    const char32_t c = p_[i_];
    if (c == U'*') lo = 0, ++i_;
    else if (c == U'+') lo = 1, ++i_;
    else if (c == U'?') lo = 0, hi = 1, ++i_;
    else if (c == U'{') {
      const size_t save = i_++;
      int a1 = 0, b1 = 0;
      const bool has_a = number(a1);
      if (has_a && at(U'}')) lo = a1, hi = a1, ++i_;
      else if (has_a && at(U',')) {
        ++i_;
        const bool has_b = number(b1);
        if (!at(U'}')) { i_ = save; return false; }
        ++i_;
        lo = a1, hi = has_b ? b1 : -1;
      } else { i_ = save; return false; }          // a literal '{' in Ruby syntax
    } else {
      return false;
    }
    Node r;
    r.kind = Kind::Repeat;
    r.min = lo, r.max = hi;
    if (at(U'?')) r.greedy = false, ++i_;
    else if (at(U'+')) fail("a possessive quantifier");
    r.kids.push_back(std::move(a));
    a = std::move(r);
    return true;
  }

  static Node make(Kind k) { Node n; n.kind = k; return n; }
  static Node chr(char32_t c) { Node n; n.kind = Kind::Char; n.ch = c; return n; }
  static Node named(Named k, bool negated) {
    Node n;
    n.kind = Kind::Class;
    n.items.push_back(ClassItem{k, false, 0, 0});
    n.negated = negated;
    return n;
  }

  Node atom() {
    const char32_t c = p_[i_++];
    switch (c) {
      case U'(': {
        Node inner;
        if (at(U"?:")) { i_ += 2; inner = alternation(); }
        else if (at(U"?=") || at(U"?!")) {
          const bool neg = p_[i_ + 1] == U'!';
          i_ += 2;
          inner = make(Kind::Look);
          inner.negated = neg;
          inner.kids.push_back(alternation());
        } else if (at(U"?<=") || at(U"?<!")) fail("lookbehind (?<=...) (?<!...)");
        else if (at(U"?<")) {
          const size_t close = p_.find(U'>', i_);
          if (close == U32::npos) fail("a group name without '>'");
          i_ = close + 1;
          inner = alternation();
        } else if (at(U'?')) fail("the group (" + utf8(p_.substr(i_, 2)));
        else inner = alternation();
        if (!at(U')')) fail("an unclosed '('");
        ++i_;
        return inner;
      }
      case U'[': return klass();
      case U'.': return make(Kind::Any);
      case U'^': return make(Kind::LineStart);
      case U'$': return make(Kind::LineEnd);
      case U'*': case U'+': case U'?': fail("a quantifier with nothing before it");
      case U'\\': return escape();
      default: return chr(c);
    }
  }

  char32_t hex(size_t digits) {
    char32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      if (i_ >= p_.size() || !std::isxdigit(static_cast<int>(p_[i_] < 128 ? p_[i_] : 0))) fail("a malformed hex escape");
      const char32_t d = p_[i_++];
      v = v * 16 + static_cast<char32_t>(d <= U'9' ? d - U'0' : (d | 0x20) - U'a' + 10);
    }
    return v;
  }

  // An escape's meaning: a single character (*out_char) or a class item (*out_item). Shared by atoms and classes.
  bool escape_item(char32_t& out_char, ClassItem& out_item, bool& out_negated) {
    if (i_ >= p_.size()) fail("a trailing '\\'");
    const char32_t e = p_[i_++];
    out_negated = false;
    switch (e) {
      case U'n': out_char = U'\n'; return false;
      case U't': out_char = U'\t'; return false;
      case U'r': out_char = U'\r'; return false;
      case U'f': out_char = U'\f'; return false;
      case U'v': out_char = U'\v'; return false;
      case U'e': out_char = 0x1B; return false;
      case U'a': out_char = 0x07; return false;
      case U'u': out_char = hex(4); return false;
      case U'x':
        if (at(U'{')) {
          const size_t close = p_.find(U'}', i_);
          if (close == U32::npos || close == i_ + 1 || close > i_ + 9) fail("a malformed \\x{...}");
          ++i_;
          out_char = hex(close - i_);
          ++i_;
        } else {
          out_char = hex(2);
        }
        return false;
      case U's': case U'S': out_item = {Named::Space, false, 0, 0}; out_negated = e == U'S'; return true;
      case U'w': case U'W': out_item = {Named::Word, false, 0, 0}; out_negated = e == U'W'; return true;
      case U'd': case U'D': out_item = {Named::Decimal, false, 0, 0}; out_negated = e == U'D'; return true;
      case U'p': case U'P': {
        const size_t close = at(U'{') ? p_.find(U'}', i_) : U32::npos;
        if (close == U32::npos) fail(std::string("\\") + static_cast<char>(e));
        U32 name = p_.substr(i_ + 1, close - i_ - 1);
        const std::string shown = "\\" + std::string(1, static_cast<char>(e)) + utf8(p_.substr(i_, close - i_ + 1));
        i_ = close + 1;
        bool neg = e == U'P';
        if (!name.empty() && name[0] == U'^') neg = !neg, name.erase(0, 1);
        if (name == U"L" || name == U"Letter") out_item = {Named::Letter, false, 0, 0};
        else if (name == U"N" || name == U"Number") out_item = {Named::Number, false, 0, 0};
        else fail(shown);
        out_negated = neg;
        return true;
      }
      default:
        if ((e >= U'a' && e <= U'z') || (e >= U'A' && e <= U'Z') || (e >= U'0' && e <= U'9'))
          fail(std::string("\\") + static_cast<char>(e));
        out_char = e;
        return false;
    }
  }

  Node escape() {
    if (i_ < p_.size()) {
      switch (p_[i_]) {
        case U'A': ++i_; return make(Kind::TextStart);
        case U'z': ++i_; return make(Kind::TextEnd);
        case U'Z': ++i_; return make(Kind::TextEndNewline);
        case U'b': ++i_; return make(Kind::WordBoundary);
        case U'B': ++i_; return make(Kind::NotWordBoundary);
        default: break;
      }
    }
    char32_t c = 0;
    ClassItem item;
    bool neg = false;
    if (!escape_item(c, item, neg)) return chr(c);
    return named(item.kind, neg);
  }

  Node klass() {
    Node n;
    n.kind = Kind::Class;
    if (at(U'^')) n.negated = true, ++i_;
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) fail("an unclosed '['");
      if (at(U']') && !first) { ++i_; break; }
      first = false;
      if (at(U'[')) fail("a nested class or POSIX bracket [...[...]...]");
      if (at(U"&&")) fail("class intersection &&");
      char32_t lo = 0;
      if (at(U'\\')) {
        ++i_;
        ClassItem item;
        bool neg = false;
        if (escape_item(lo, item, neg)) {
          item.negated = neg;
          n.items.push_back(item);
          continue;
        }
      } else {
        lo = p_[i_++];
      }
      char32_t hi = lo;
      if (at(U'-') && i_ + 1 < p_.size() && p_[i_ + 1] != U']') {
        ++i_;
        if (at(U'\\')) {
          ++i_;
          ClassItem item;
          bool neg = false;
          if (escape_item(hi, item, neg)) fail("a range ending in a class escape");
        } else {
          hi = p_[i_++];
        }
        if (hi < lo) fail("an empty range");
      }
      n.items.push_back(ClassItem{Named::Range, false, lo, hi});
    }
    return n;
  }
};

// A continuation: what must match after a node (a reference to a lambda; no allocation).
class Next {
 public:
  template <class F>
  Next(const F& f) : obj_(&f), call_([](const void* o, size_t i) { return (*static_cast<const F*>(o))(i); }) {}
  Next(const Next&) = default;
  bool operator()(size_t i) const { return call_(obj_, i); }

 private:
  const void* obj_;
  bool (*call_)(const void*, size_t);
};

class Matcher {
 public:
  explicit Matcher(const U32& s) : s_(s) {}

  bool match(const Node& n, size_t i, Next k) const {
    const size_t len = s_.size();
    switch (n.kind) {
      case Kind::Char: case Kind::Class: case Kind::Any:
        return i < len && n.has(s_[i]) && k(i + 1);
      case Kind::Seq: return seq(n, 0, i, k);
      case Kind::Alt:
        for (const auto& kid : n.kids)
          if (match(kid, i, k)) return true;
        return false;
      case Kind::Repeat: {
        const Node& kid = n.kids[0];
        if (kid.single()) {
          size_t count = 0;
          while (i + count < len && (n.max < 0 || count < static_cast<size_t>(n.max)) && kid.has(s_[i + count])) ++count;
          if (count < static_cast<size_t>(n.min)) return false;
          if (n.greedy) {
            for (size_t c = count + 1; c-- > static_cast<size_t>(n.min);)
              if (k(i + c)) return true;
          } else {
            for (size_t c = static_cast<size_t>(n.min); c <= count; ++c)
              if (k(i + c)) return true;
          }
          return false;
        }
        return repeat(n, 0, i, k);
      }
      case Kind::Look: {
        const bool found = match(n.kids[0], i, [](size_t) { return true; });
        return found != n.negated && k(i);
      }
      case Kind::LineStart: return (i == 0 || s_[i - 1] == U'\n') && k(i);
      case Kind::LineEnd: return (i == len || s_[i] == U'\n') && k(i);
      case Kind::TextStart: return i == 0 && k(i);
      case Kind::TextEnd: return i == len && k(i);
      case Kind::TextEndNewline: return (i == len || (i + 1 == len && s_[i] == U'\n')) && k(i);
      case Kind::WordBoundary: case Kind::NotWordBoundary: {
        const bool before = i > 0 && is_word_char(s_[i - 1]), after = i < len && is_word_char(s_[i]);
        return ((before != after) == (n.kind == Kind::WordBoundary)) && k(i);
      }
    }
    return false;
  }

 private:
  const U32& s_;

  bool seq(const Node& n, size_t idx, size_t i, Next k) const {
    if (idx == n.kids.size()) return k(i);
    return match(n.kids[idx], i, [&](size_t j) { return seq(n, idx + 1, j, k); });
  }

  bool repeat(const Node& n, int count, size_t i, Next k) const {
    const bool more = n.max < 0 || count < n.max;
    const auto again = [&](size_t j) { return (j != i || count < n.min) && repeat(n, count + 1, j, k); };
    if (n.greedy) {
      if (more && match(n.kids[0], i, again)) return true;
      return count >= n.min && k(i);
    }
    if (count >= n.min && k(i)) return true;
    return more && match(n.kids[0], i, again);
  }
};

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where)
    : root_(std::make_shared<Node>(Parser(pattern, where).parse())) {}

Regex Regex::literal(const U32& text) {
  Node seq;
  seq.kind = Kind::Seq;
  for (char32_t c : text) {
    Node ch;
    ch.kind = Kind::Char;
    ch.ch = c;
    seq.kids.push_back(std::move(ch));
  }
  Regex r;
  r.root_ = std::make_shared<Node>(std::move(seq));
  return r;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(const U32& text) const {
  std::vector<std::pair<size_t, size_t>> out;
  const Matcher m(text);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = 0;
    const size_t from = start;
    if (m.match(*root_, from, [&](size_t j) { end = j; return j > from; })) {
      out.emplace_back(from, end);
      start = end;
    } else {
      ++start;
    }
  }
  return out;
}

}  // namespace ditskip::text
