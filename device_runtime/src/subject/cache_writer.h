// The resumable residual-cache writer (ditskip_edge/runtime/cache.py CacheWriter(resumable=True)), byte for byte:
// entries back to back in shard_NNNNN.bin (written as .tmp, renamed when closed at about DEFAULT_SHARD_BYTES), each
// entry made durable as it is added (shard fsync'ed, then one line of cache_journal.jsonl, json.dumps(separators=
// (",", ":")), fsync'ed); a writer opened on a folder with a journal continues it (header checked: same identity,
// codec, shapes, shard size and run, else cache.py's UserError line; a torn last line cut off; the open shard cut
// back to its last journalled entry and reopened; shards begun after it removed). finish() writes cache_index.json
// (json.dumps(indent=1)) and removes the journal.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bundle/cache_reader.h"
#include "util/json.h"
#include "util/sha256.h"

namespace ditskip {

constexpr int64_t kDefaultShardBytes = int64_t(64) << 20;

class CacheWriter {
 public:
  CacheWriter(const std::string& dir, json identity, const std::string& codec_spec,
              int64_t shard_bytes = kDefaultShardBytes, const std::string& run = "");
  ~CacheWriter();
  CacheWriter(const CacheWriter&) = delete;
  CacheWriter& operator=(const CacheWriter&) = delete;

  // Decoded shapes {"x0": [...], "front.img": [B, N, D], ...} (in order): fixes the layout, then continues the
  // folder's journal if it has one, else starts one (stale shards removed).
  void set_shapes(const json& shapes);
  const std::vector<CachePart>& layout() const { return layout_; }
  int64_t entry_bytes() const { return entry_bytes_; }
  int64_t next_index() const { return int64_t(entries_.size()); }
  const std::vector<json>& extras() const { return extras_; }   // the journalled extra of every entry

  // One encoded entry (entry_bytes() bytes in layout order), in order; `extra` journalled with it.
  void add(int64_t index, const std::vector<uint8_t>& entry, const json& extra);
  // Closes the last shard, writes the index (with `extra`'s fields after shapes) and removes the journal.
  json finish(const json& extra);
  // Stops without finishing: the journal and the open shard stay.
  void close();

 private:
  json header() const;
  void journal_append(const json& record);
  void resume_or_start();
  void open_shard();
  void close_shard();

  std::string dir_, codec_spec_, run_;
  json identity_, shapes_ = json::object();
  int64_t shard_bytes_;
  std::vector<CachePart> layout_;
  int64_t entry_bytes_ = 0;
  bool layout_set_ = false;
  std::vector<json> entries_, extras_;
  json shards_ = json::object();
  int fd_ = -1, journal_fd_ = -1;
  std::string name_;
  Sha256* hash_ = nullptr;
  int64_t pos_ = 0;
};

// cache_format.py entry_layout(...)'s "layout" field ({part: {dtype, shape, offset, bytes}})
json layout_to_json(const std::vector<CachePart>& layout);

}  // namespace ditskip
