// The core's one error type. Everything inside the core throws `Failure`; the C boundary (src/c_api.cpp) catches it
// and turns it into a ditskip_status plus the per-handle last-error message. Nothing else crosses the C boundary.
//
// Messages are one line, name the file and the field and what was expected, and match the Python runtime's
// (ditskip_edge/runtime/*) wording where the tests compare refusals (tests/test_runtime.py's DAMAGE table).
#pragma once

#include <stdexcept>
#include <string>

#include "ditskip/ditskip.h"

namespace ditskip {

class Failure : public std::runtime_error {
 public:
  Failure(ditskip_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  ditskip_status status() const { return status_; }

 private:
  ditskip_status status_;
};

// A user's mistake or a bundle that does not match its manifest (Python: UserError / BundleError): exit code 2.
[[noreturn]] inline void refuse(const std::string& message) { throw Failure(DITSKIP_BAD_INPUT, message); }
// A file could not be read or written (disk full, permissions).
[[noreturn]] inline void io_failure(const std::string& message) { throw Failure(DITSKIP_IO_ERROR, message); }
// ExecuTorch refused or failed a call (its Error code is in the message).
[[noreturn]] inline void runtime_failure(const std::string& message) { throw Failure(DITSKIP_RUNTIME_ERROR, message); }

}  // namespace ditskip
