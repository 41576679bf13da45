// Memory as a phone counts it, read from /proc/self/status (ditskip_edge/runtime/footprint.py): RssAnon (dirty
// anonymous, the stand-in for the phone's footprint) apart from RssFile (clean file-backed pages: a mapped .ptd).
// Every figure is bytes.
#pragma once

#include <cstdint>

#include "util/json.h"

namespace ditskip {

struct Footprint {
  int64_t anon_bytes = 0;       // RssAnon
  int64_t file_bytes = 0;       // RssFile
  int64_t shmem_bytes = 0;      // RssShmem
  int64_t data_bytes = 0;       // VmData
  int64_t locked_bytes = 0;     // VmLck
  int64_t peak_rss_bytes = 0;   // VmHWM
  json to_json() const;         // footprint.py Footprint.to_json: the fields in this order
};

// False where the platform does not report all six (footprint.py read_footprint's None).
bool read_footprint(Footprint& out);

}  // namespace ditskip
