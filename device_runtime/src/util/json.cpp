// Python's json.dumps / repr over nlohmann::ordered_json (see json.h).
#include "util/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <vector>

#include "util/failure.h"

namespace ditskip {
namespace {

// Decodes one UTF-8 code point at s[i]; advances i. Invalid bytes give U+FFFD (Python's strings never hold them).
uint32_t next_code_point(const std::string& s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  int extra = 0;
  uint32_t cp = 0;
  if (b0 < 0x80) {
    i += 1;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    extra = 1, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    extra = 2, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    extra = 3, cp = b0 & 0x07;
  } else {
    i += 1;
    return 0xFFFD;
  }
  for (int k = 1; k <= extra; ++k) {
    if (i + k >= s.size() || (byte(i + k) & 0xC0) != 0x80) {
      i += 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  i += extra + 1;
  return cp;
}

void append_u4(std::string& out, uint32_t unit) {
  static const char* hex = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += hex[(unit >> shift) & 0xF];
}

// json.dumps' string encoder with ensure_ascii=True.
void dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = next_code_point(s, i);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp >= 0x20 && cp <= 0x7E) {
      out += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      append_u4(out, cp);
    } else {
      const uint32_t v = cp - 0x10000;
      append_u4(out, 0xD800 | (v >> 10));
      append_u4(out, 0xDC00 | (v & 0x3FF));
    }
  }
  out += '"';
}

struct Writer {
  const PyDumps& how;
  std::string item_sep, key_sep;
  std::string out;

  void newline(int depth) {
    out += '\n';
    out.append(static_cast<size_t>(how.indent) * depth, ' ');
  }

  void value(const json& v, int depth) {
    switch (v.type()) {
      case json::value_t::null: out += "null"; return;
      case json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
      case json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); return;
      case json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
      case json::value_t::number_float: {
        const double d = v.get<double>();
        if (std::isnan(d)) out += "NaN";                       // json.dumps' allow_nan=True spellings
        else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
        else out += py_float_repr(d);
        return;
      }
      case json::value_t::string: dump_string(out, v.get_ref<const std::string&>()); return;
      case json::value_t::array: {
        if (v.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        bool first = true;
        for (const auto& item : v) {
          if (!first) out += item_sep;
          first = false;
          if (how.indent >= 0) newline(depth + 1);
          value(item, depth + 1);
        }
        if (how.indent >= 0) newline(depth);
        out += ']';
        return;
      }
      case json::value_t::object: {
        if (v.empty()) {
          out += "{}";
          return;
        }
        std::vector<std::pair<const std::string*, const json*>> items;
        for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(&it.key(), &it.value());
        if (how.sort_keys)   // Python sorts str by code point: UTF-8 byte order is the same
          std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return *a.first < *b.first; });
        out += '{';
        bool first = true;
        for (const auto& [key, item] : items) {
          if (!first) out += item_sep;
          first = false;
          if (how.indent >= 0) newline(depth + 1);
          dump_string(out, *key);
          out += key_sep;
          value(*item, depth + 1);
        }
        if (how.indent >= 0) newline(depth);
        out += '}';
        return;
      }
      default:   // binary / discarded: never produced by parse_json
        out += "null";
        return;
    }
  }
};

void repr_string(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  static const char* hex = "0123456789abcdef";
  out += quote;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = next_code_point(s, i);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD) {   // not printable
      out += "\\x";
      out += hex[cp >> 4];
      out += hex[cp & 0xF];
    } else {
      out.append(s, start, i - start);
    }
  }
  out += quote;
}

void repr_value(std::string& out, const json& v) {
  switch (v.type()) {
    case json::value_t::null: out += "None"; return;
    case json::value_t::boolean: out += v.get<bool>() ? "True" : "False"; return;
    case json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case json::value_t::number_float: out += py_float_repr(v.get<double>()); return;
    case json::value_t::string: repr_string(out, v.get_ref<const std::string&>()); return;
    case json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v) {
        if (!first) out += ", ";
        first = false;
        repr_value(out, item);
      }
      out += ']';
      return;
    }
    case json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        repr_string(out, it.key());
        out += ": ";
        repr_value(out, it.value());
      }
      out += '}';
      return;
    }
    default: out += "None"; return;
  }
}

// An integer-valued json (bool, int, unsigned) as sign + magnitude.
struct Int {
  bool negative;
  uint64_t magnitude;
};

bool as_int(const json& v, Int& out) {
  if (v.is_boolean()) {
    out = {false, v.get<bool>() ? 1u : 0u};
    return true;
  }
  if (v.is_number_unsigned()) {
    out = {false, v.get<uint64_t>()};
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    out = {i < 0, i < 0 ? uint64_t(0) - static_cast<uint64_t>(i) : static_cast<uint64_t>(i)};
    return true;
  }
  return false;
}

}  // namespace

std::string py_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);   // [-]d[.ddd]e(+|-)XX, the shortest round-trip digits
  size_t pos = 0;
  std::string sign;
  if (sci[0] == '-') sign = "-", pos = 1;
  const size_t e_at = sci.find('e');
  std::string digits;
  for (size_t k = pos; k < e_at; ++k)
    if (sci[k] != '.') digits += sci[k];
  const int exponent = std::stoi(sci.substr(e_at + 1));
  std::string out = sign;
  if (exponent >= -4 && exponent < 16) {                      // Python's repr: fixed notation in this range
    if (exponent >= 0) {
      const size_t int_len = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int mag = exponent < 0 ? -exponent : exponent;
  out += exponent < 0 ? "e-" : "e+";
  if (mag < 10) out += '0';
  out += std::to_string(mag);
  return out;
}

std::string py_dumps(const json& value, const PyDumps& how) {
  Writer w{how, how.item_separator, how.key_separator, {}};
  // json.dumps(indent=n) without separators uses (",", ": "): the item separator loses its trailing space
  if (how.indent >= 0 && w.item_sep == ", ") w.item_sep = ",";
  w.value(value, 0);
  return std::move(w.out);
}

std::string py_repr(const json& value) {
  std::string out;
  repr_value(out, value);
  return out;
}

std::string py_str(const json& value) {
  return value.is_string() ? value.get<std::string>() : py_repr(value);
}

bool py_equal(const json& a, const json& b) {
  Int ia{}, ib{};
  const bool a_int = as_int(a, ia), b_int = as_int(b, ib);
  if (a_int && b_int) return ia.negative == ib.negative && ia.magnitude == ib.magnitude;
  if ((a_int || a.is_number_float()) && (b_int || b.is_number_float())) {
    if (a.is_number_float() && b.is_number_float()) return a.get<double>() == b.get<double>();
    const double d = a.is_number_float() ? a.get<double>() : b.get<double>();
    const Int i = a_int ? ia : ib;
    // exact comparison, as Python compares int and float: the float must be integral and equal to the integer
    if (!std::isfinite(d) || std::floor(d) != d) return false;
    if ((d < 0) != i.negative && !(d == 0 && i.magnitude == 0)) return false;
    const double mag = std::fabs(d);
    if (mag >= 18446744073709551616.0) return false;
    return static_cast<uint64_t>(mag) == i.magnitude;
  }
  if (a.type() != b.type()) return false;
  if (a.is_string()) return a.get_ref<const std::string&>() == b.get_ref<const std::string&>();
  if (a.is_null()) return true;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k)
      if (!py_equal(a[k], b[k])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      const auto other = b.find(it.key());
      if (other == b.end() || !py_equal(it.value(), *other)) return false;
    }
    return true;
  }
  return a == b;
}

json parse_json(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    refuse(where + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace ditskip
