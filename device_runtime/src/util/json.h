// JSON for the core: nlohmann::json (header-only, Debian nlohmann-json3-dev) and a writer that reproduces Python's
// json.dumps byte for byte, for the digests the bundle format takes over JSON text (the cache identity's SHA-256,
// the checkpoint's losses, safetensors headers).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ditskip {

using json = nlohmann::ordered_json;   // keeps a document's key order (the manifest's, Python dicts')

struct PyDumps {
  bool sort_keys = false;             // json.dumps(sort_keys=True)
  const char* item_separator = ", ";  // json.dumps' default separators; (",", ":") for compact output
  const char* key_separator = ": ";
  int indent = -1;                    // -1: one line; n >= 0: json.dumps(indent=n) (item separator then ",")
};

// Python's json.dumps(value, ensure_ascii=True, ...) of a parsed document: floats as Python's repr (the shortest
// round-trip digits), non-ASCII as \uXXXX (surrogate pairs above the BMP), keys in document order or sorted.
std::string py_dumps(const json& value, const PyDumps& how = {});
// Python's repr(float) (e.g. 0.1, 1e-05, 1e+16, 100.0; inf / nan as "inf" / "nan"). py_dumps writes a non-finite
// float as json.dumps does (NaN, Infinity, -Infinity); parse_json never produces one.
std::string py_float_repr(double value);
// Python's repr / str of the parsed value (None, True, 'text', [1, 2], {'k': 0.5}): for refusal messages that
// quote a field as the Python runtime's f"{value!r}" does.
std::string py_repr(const json& value);
std::string py_str(const json& value);     // a string as itself, anything else as py_repr
// Python's == of two parsed values: dicts equal whatever their key order, 1 == 1.0 == True.
bool py_equal(const json& a, const json& b);

// Parses JSON text; a syntax error is refused naming `where`.
json parse_json(const std::string& text, const std::string& where);

}  // namespace ditskip
