// The library's log sink (ditskip_set_log_callback; default stderr). The library never writes to stdout.
#pragma once

#include <string>

namespace ditskip {

enum LogLevel { kLogInfo = 0, kLogWarning = 1 };
void log_message(LogLevel level, const std::string& message);   // defined in c_api.cpp

}  // namespace ditskip
