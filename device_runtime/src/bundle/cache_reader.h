// The residual cache reader (ditskip_edge/runtime/cache.py CacheReader): index checks on open (format, version,
// identity digest, identity against the bundle's, layout against codec + shapes, entry count, shard sizes, entry
// bounds); each read maps the entry's shard and checks that entry's SHA-256. The training program decodes the stored
// parts itself, so the reader hands them over as stored (the codecs' layouts: cache_format.py entry_layout).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "util/files.h"
#include "util/json.h"

namespace ditskip {

struct CachePart {                     // one stored part of an entry
  std::string name;                    // "x0", "front.img.codes", ...
  std::string dtype;                   // float32 | int8 | uint8
  std::vector<int64_t> shape;
  int64_t offset = 0, bytes = 0;       // inside the entry
};

struct CacheEntry {                    // one sample's bytes, owned (a copy of the entry's bytes alone)
  std::vector<uint8_t> bytes;
  const std::vector<CachePart>* parts = nullptr;
  const uint8_t* part(const std::string& name) const;   // pointer into bytes, or nullptr
};

class CacheReader {
 public:
  // identity: the bundle's cache_identity (nullptr: not checked); expected_entries < 0: not checked
  CacheReader(const std::string& dir, const json* identity, int64_t expected_entries);
  int64_t size() const;
  const std::vector<CachePart>& parts() const { return parts_; }   // in layout order
  CacheEntry read(int64_t index);                                 // refuses a corrupt entry (cache.py's message)

 private:
  std::string dir_;
  json index_;
  std::vector<CachePart> parts_;
  std::map<std::string, MappedFile> maps_;
};

// cache_format.py entry_layout(CacheCodec.parse(spec), shapes): every codec (fp32, fp16, int8-token|channel,
// int8/int4-gG|tG, lowrank-rR, overrides "DEFAULT,name=CODEC"), parts in order, 64-byte aligned. Returns the
// layout and sets entry_bytes.
std::vector<CachePart> entry_layout(const std::string& codec_spec, const json& shapes, int64_t& entry_bytes);

}  // namespace ditskip
