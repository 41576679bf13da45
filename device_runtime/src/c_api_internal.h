// What the C boundary's source files share (c_api.cpp: bundles, training, raw programs; c_api_subject.cpp: the
// subject stage; c_api_generate.cpp: generation): the exception-to-status guard, the thread's last error, owned
// strings for the caller.
#pragma once

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "ditskip/ditskip.h"
#include "util/failure.h"
#include "util/json.h"

namespace ditskip::c_api {

extern thread_local std::string last_error;

// Runs body() -> ditskip_status; ditskip::Failure gives its status and message, anything else
// DITSKIP_INTERNAL_ERROR (a malformed JSON field DITSKIP_BAD_INPUT); the message becomes this thread's last error.
template <typename F>
ditskip_status guarded(F&& body) {
  last_error.clear();
  try {
    return body();
  } catch (const Failure& e) {
    last_error = e.what();
    return e.status();
  } catch (const nlohmann::json::exception& e) {   // a field of another type than the format says
    last_error = std::string("a bundle or run file has a malformed field (") + e.what() + ")";
    return DITSKIP_BAD_INPUT;
  } catch (const std::bad_alloc&) {
    last_error = "out of memory";
    return DITSKIP_INTERNAL_ERROR;
  } catch (const std::exception& e) {
    last_error = std::string("internal error: ") + e.what();
    return DITSKIP_INTERNAL_ERROR;
  } catch (...) {
    last_error = "internal error: unknown exception";
    return DITSKIP_INTERNAL_ERROR;
  }
}

inline char* owned_copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// json.dumps(doc, indent=1): the summaries the Python runtime prints
inline std::string indented(const json& doc) {
  PyDumps how;
  how.indent = 1;
  return py_dumps(doc, how);
}


}  // namespace ditskip::c_api
