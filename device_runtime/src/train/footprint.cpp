#include "train/footprint.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ditskip {

json Footprint::to_json() const {
  json j = json::object();
  j["anon_bytes"] = anon_bytes;
  j["file_bytes"] = file_bytes;
  j["shmem_bytes"] = shmem_bytes;
  j["data_bytes"] = data_bytes;
  j["locked_bytes"] = locked_bytes;
  j["peak_rss_bytes"] = peak_rss_bytes;
  return j;
}

bool read_footprint(Footprint& out) {
  struct Field { const char* key; int64_t Footprint::*member; };
  static const Field fields[] = {{"RssAnon", &Footprint::anon_bytes},     {"RssFile", &Footprint::file_bytes},
                                 {"RssShmem", &Footprint::shmem_bytes},   {"VmData", &Footprint::data_bytes},
                                 {"VmLck", &Footprint::locked_bytes},     {"VmHWM", &Footprint::peak_rss_bytes}};
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return false;
  Footprint fp;
  int found = 0;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const char* colon = std::strchr(line, ':');
    if (colon == nullptr) continue;
    const size_t key_len = size_t(colon - line);
    for (const Field& field : fields) {
      if (std::strlen(field.key) == key_len && std::strncmp(line, field.key, key_len) == 0) {
        fp.*field.member = std::strtoll(colon + 1, nullptr, 10) * 1024;   // the kernel reports kB
        ++found;
      }
    }
  }
  std::fclose(f);
  if (found != int(sizeof fields / sizeof fields[0])) return false;
  out = fp;
  return true;
}

}  // namespace ditskip
