// Files as the core uses them: whole reads, atomic writes (temporary sibling + fsync + rename), folders, and a
// read-only memory map (clean file-backed pages: never anonymous memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ditskip {

std::string read_text(const std::string& path);                  // io_failure naming the path if unreadable
std::vector<uint8_t> read_bytes(const std::string& path);
bool is_file(const std::string& path);
bool is_dir(const std::string& path);
int64_t file_size(const std::string& path);                       // -1 if missing
void make_dirs(const std::string& path);                          // mkdir -p
std::string join_path(const std::string& a, const std::string& b);
// Writes `bytes` to path.tmp, fsyncs, renames onto path: a reader sees the old file or the new one, never half.
void atomic_write(const std::string& path, const void* data, size_t size);
// The same for a file made of pieces written one after the other (a header, then tensors from their own buffers):
// nothing is gathered into one buffer first.
struct WritePiece {
  const void* data;
  size_t size;
};
void atomic_write(const std::string& path, const std::vector<WritePiece>& pieces);
inline void atomic_write(const std::string& path, const std::string& text) { atomic_write(path, text.data(), text.size()); }

class MappedFile {   // read-only mmap of a whole file; moves, no copies
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ditskip
