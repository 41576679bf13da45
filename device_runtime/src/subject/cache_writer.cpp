// ditskip_edge/runtime/cache.py CacheWriter, resumable (see cache_writer.h).
#include "subject/cache_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "bundle/bundle.h"
#include "util/failure.h"
#include "util/files.h"

namespace ditskip {
namespace {

const char* const kJournal = "cache_journal.jsonl";
const char* const kIndex = "cache_index.json";
const char* const kFormat = "ditskip-edge-residual-cache";
constexpr int kFormatVersion = 3;

std::string why() { return std::strerror(errno); }

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      io_failure("cannot write " + path + ": " + why());
    }
    p += n;
    size -= size_t(n);
  }
}

void sync_fd(int fd, const std::string& path) {
  if (::fsync(fd) != 0) io_failure("cannot write " + path + ": " + why());
}

std::vector<std::string> shard_files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("shard_", 0) == 0) out.push_back(name);
  }
  ::closedir(d);
  return out;
}

std::string compact(const json& record) {
  PyDumps how;
  how.item_separator = ",";
  how.key_separator = ":";
  return py_dumps(record, how);
}

}  // namespace

json layout_to_json(const std::vector<CachePart>& layout) {
  json j = json::object();
  for (const CachePart& p : layout) {
    json shape = json::array();
    for (int64_t d : p.shape) shape.push_back(d);
    j[p.name] = json{{"dtype", p.dtype}, {"shape", shape}, {"offset", p.offset}, {"bytes", p.bytes}};
  }
  return j;
}

CacheWriter::CacheWriter(const std::string& dir, json identity, const std::string& codec_spec, int64_t shard_bytes,
                         const std::string& run)
    : dir_(dir), codec_spec_(codec_spec), run_(run), identity_(std::move(identity)), shard_bytes_(shard_bytes) {
  make_dirs(dir_);
}

CacheWriter::~CacheWriter() {
  close();
  delete hash_;
}

json CacheWriter::header() const {
  json h = json::object();
  h["identity_sha256"] = identity_digest(identity_);
  h["codec"] = codec_spec_;
  h["shapes"] = shapes_;
  h["shard_bytes"] = shard_bytes_;
  h["run"] = run_;
  return h;
}

void CacheWriter::set_shapes(const json& shapes) {
  if (layout_set_) {
    if (!py_equal(shapes, shapes_)) refuse("cache entry shapes " + py_repr(shapes) + " differ from the first entry's " +
                                           py_repr(shapes_));
    return;
  }
  shapes_ = shapes;
  layout_ = entry_layout(codec_spec_, shapes_, entry_bytes_);
  layout_set_ = true;
  resume_or_start();
}

void CacheWriter::journal_append(const json& record) {
  const std::string line = compact(record) + "\n";
  const std::string path = join_path(dir_, kJournal);
  write_all(journal_fd_, line.data(), line.size(), path);
  sync_fd(journal_fd_, path);
}

void CacheWriter::resume_or_start() {
  const std::string path = join_path(dir_, kJournal);
  std::vector<json> lines;
  if (is_file(path)) {
    const std::vector<uint8_t> data = read_bytes(path);
    size_t durable = 0, start = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] != '\n') continue;
      try {
        lines.push_back(json::parse(data.begin() + long(start), data.begin() + long(i)));
      } catch (const json::exception&) {
        break;                                          // a line torn by a kill: nothing after it was durable
      }
      durable = i + 1;
      start = i + 1;
    }
    if (durable < data.size() && ::truncate(path.c_str(), off_t(durable)) != 0)
      io_failure("cannot write " + path + ": " + why());
  }
  if (lines.empty()) {
    for (const std::string& stale : shard_files(dir_)) ::unlink(join_path(dir_, stale).c_str());
    journal_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (journal_fd_ < 0) io_failure("cannot write " + path + ": " + why());
    json h = json::object();
    h["header"] = header();
    journal_append(h);
    return;
  }
  const auto hit = lines[0].is_object() ? lines[0].find("header") : lines[0].end();
  if (!lines[0].is_object() || hit == lines[0].end() || !py_equal(*hit, header()))
    refuse(path + ": an interrupted residual cache for other inputs (model bundle, photos, prompt, codec or schedule "
           "differ): delete " + dir_.substr(0, dir_.rfind('/', dir_.rfind('/') - 1)) + " or pass --no-resume");
  for (size_t k = 1; k < lines.size(); ++k) {
    const json& rec = lines[k];
    if (rec.contains("entry")) {
      entries_.push_back(rec["entry"]);
      extras_.push_back(rec.contains("extra") ? rec["extra"] : json::object());
    } else if (rec.contains("shard")) {
      shards_[rec["shard"].get<std::string>()] = json{{"bytes", rec["bytes"]}, {"sha256", rec["sha256"]}};
    }
  }
  std::vector<const json*> open_entries;
  for (const json& e : entries_)
    if (!shards_.contains(e["shard"].get<std::string>())) open_entries.push_back(&e);
  if (!open_entries.empty()) {
    name_ = (*open_entries[0])["shard"].get<std::string>();
    const std::string tmp = join_path(dir_, name_ + ".tmp"), final_path = join_path(dir_, name_);
    if (!is_file(tmp) && is_file(final_path) && ::rename(final_path.c_str(), tmp.c_str()) != 0)
      io_failure("cannot write " + tmp + ": " + why());
    const json& last = *open_entries.back();
    const int64_t end = last["offset"].get<int64_t>() + last["bytes"].get<int64_t>();
    if (!is_file(tmp) || file_size(tmp) < end)
      refuse(tmp + ": shorter than its journal says (" + std::to_string(end) + " bytes): the cache in progress is "
             "damaged; delete " + dir_.substr(0, dir_.rfind('/', dir_.rfind('/') - 1)) + " or pass --no-resume");
    fd_ = ::open(tmp.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0 || ::ftruncate(fd_, off_t(end)) != 0) io_failure("cannot write " + tmp + ": " + why());
    delete hash_;
    hash_ = new Sha256();
    std::vector<uint8_t> block(1 << 20);
    int64_t done = 0;
    while (done < end) {
      const ssize_t n = ::pread(fd_, block.data(), size_t(std::min<int64_t>(end - done, int64_t(block.size()))), off_t(done));
      if (n <= 0) io_failure("cannot read " + tmp + ": " + why());
      hash_->update(block.data(), size_t(n));
      done += n;
    }
    if (::lseek(fd_, off_t(end), SEEK_SET) < 0) io_failure("cannot write " + tmp + ": " + why());
    pos_ = end;
  }
  for (const std::string& stale : shard_files(dir_)) {       // shards begun after the last journalled entry
    std::string name = stale;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) name.resize(name.size() - 4);
    if (!shards_.contains(name) && name != (open_entries.empty() ? std::string() : name_))
      ::unlink(join_path(dir_, stale).c_str());
  }
  journal_fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (journal_fd_ < 0) io_failure("cannot write " + path + ": " + why());
}

void CacheWriter::open_shard() {
  char name[32];
  std::snprintf(name, sizeof name, "shard_%05d.bin", int(shards_.size()));
  name_ = name;
  const std::string tmp = join_path(dir_, name_ + ".tmp");
  fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) io_failure("cannot write " + tmp + ": " + why());
  delete hash_;
  hash_ = new Sha256();
  pos_ = 0;
}

void CacheWriter::close_shard() {
  if (fd_ < 0) return;
  const std::string tmp = join_path(dir_, name_ + ".tmp");
  sync_fd(fd_, tmp);
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp.c_str(), join_path(dir_, name_).c_str()) != 0) io_failure("cannot write " + tmp + ": " + why());
  shards_[name_] = json{{"bytes", pos_}, {"sha256", hash_->hex_digest()}};
  if (journal_fd_ >= 0) {
    json rec = json::object();
    rec["shard"] = name_;
    rec["bytes"] = pos_;
    rec["sha256"] = shards_[name_]["sha256"];
    journal_append(rec);
  }
}

void CacheWriter::add(int64_t index, const std::vector<uint8_t>& entry, const json& extra) {
  if (!layout_set_) refuse("set_shapes() before the first add()");
  if (index != next_index())
    refuse("cache entries must be added in order: got " + std::to_string(index) + ", expected " +
           std::to_string(next_index()));
  if (int64_t(entry.size()) != entry_bytes_) refuse("cache entry " + std::to_string(index) + ": wrong size");
  if (fd_ < 0 || (pos_ + entry_bytes_ > shard_bytes_ && pos_ > 0)) {
    close_shard();
    open_shard();
  }
  const std::string tmp = join_path(dir_, name_ + ".tmp");
  write_all(fd_, entry.data(), entry.size(), tmp);
  hash_->update(entry.data(), entry.size());
  json e = json::object();
  e["shard"] = name_;
  e["offset"] = pos_;
  e["bytes"] = entry_bytes_;
  e["sha256"] = sha256_hex(entry.data(), entry.size());
  entries_.push_back(e);
  extras_.push_back(extra);
  pos_ += entry_bytes_;
  if (journal_fd_ >= 0) {
    sync_fd(fd_, tmp);
    json rec = json::object();
    rec["entry"] = e;
    rec["extra"] = extra;
    journal_append(rec);
  }
}

json CacheWriter::finish(const json& extra) {
  close_shard();
  json index = json::object();
  index["format"] = kFormat;
  index["format_version"] = kFormatVersion;
  index["identity"] = identity_;
  index["identity_sha256"] = identity_digest(identity_);
  index["codec"] = json{{"spec", codec_spec_}};
  index["shapes"] = shapes_;
  for (auto it = extra.begin(); it != extra.end(); ++it) index[it.key()] = it.value();
  index["layout"] = layout_to_json(layout_);
  index["entry_bytes"] = entry_bytes_;
  index["num_entries"] = next_index();
  index["shards"] = shards_;
  index["entries"] = json(entries_);
  PyDumps how;
  how.indent = 1;
  atomic_write(join_path(dir_, kIndex), py_dumps(index, how));
  if (journal_fd_ >= 0) {
    ::close(journal_fd_);
    journal_fd_ = -1;
    ::unlink(join_path(dir_, kJournal).c_str());
  }
  return index;
}

void CacheWriter::close() {
  if (fd_ >= 0) ::close(fd_);
  if (journal_fd_ >= 0) ::close(journal_fd_);
  fd_ = journal_fd_ = -1;
}

}  // namespace ditskip
