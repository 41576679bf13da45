// Whole-file reads, atomic writes and read-only maps (POSIX: Linux, Android, Apple).
#include "util/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/failure.h"

namespace ditskip {
namespace {

std::string why() { return std::strerror(errno); }

// Opens read-only; io_failure naming the path.
int open_read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_failure("cannot read " + path + ": " + why());
  return fd;
}

void read_all(const std::string& path, int fd, void* dst, size_t size) {
  auto* p = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string reason = why();
      ::close(fd);
      io_failure("cannot read " + path + ": " + reason);
    }
    if (n == 0) {
      ::close(fd);
      io_failure("cannot read " + path + ": the file shrank while it was read");
    }
    done += static_cast<size_t>(n);
  }
}

size_t open_size(const std::string& path, int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string reason = why();
    ::close(fd);
    io_failure("cannot read " + path + ": " + reason);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    io_failure("cannot read " + path + ": it is a folder");
  }
  return static_cast<size_t>(st.st_size);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;            // some platforms cannot open folders: the rename is still atomic
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string read_text(const std::string& path) {
  const int fd = open_read(path);
  std::string out(open_size(path, fd), '\0');
  read_all(path, fd, out.data(), out.size());
  ::close(fd);
  return out;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  const int fd = open_read(path);
  std::vector<uint8_t> out(open_size(path, fd));
  read_all(path, fd, out.data(), out.size());
  ::close(fd);
  return out;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_size);
}

void make_dirs(const std::string& path) {
  if (path.empty() || is_dir(path)) return;
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_dirs(path.substr(0, slash));
  if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST) io_failure("cannot create folder " + path + ": " + why());
  if (!is_dir(path)) io_failure("cannot create folder " + path + ": a file is in the way");
}

// pathlib.PurePosixPath(a) / b as str(): b absolute wins; empty and "." parts and repeated or trailing slashes go.
std::string join_path(const std::string& a, const std::string& b) {
  const std::string joined = (!b.empty() && b[0] == '/') || a.empty() ? b : a + "/" + b;
  std::string out;
  if (!joined.empty() && joined[0] == '/') out = "/";
  size_t i = 0;
  while (i <= joined.size()) {
    size_t j = joined.find('/', i);
    if (j == std::string::npos) j = joined.size();
    const std::string part = joined.substr(i, j - i);
    if (!part.empty() && part != ".") {
      if (!out.empty() && out.back() != '/') out += '/';
      out += part;
    }
    i = j + 1;
  }
  return out.empty() ? "." : out;
}

void atomic_write(const std::string& path, const void* data, size_t size) {
  atomic_write(path, std::vector<WritePiece>{{data, size}});
}

void atomic_write(const std::string& path, const std::vector<WritePiece>& pieces) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_failure("cannot write " + tmp + ": " + why());
  for (const WritePiece& piece : pieces) {
    const auto* p = static_cast<const uint8_t*>(piece.data);
    const size_t size = piece.size;
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd, p + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const std::string reason = why();
        ::close(fd);
        ::unlink(tmp.c_str());
        io_failure("cannot write " + tmp + ": " + reason);
      }
      done += static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0) {
    const std::string reason = why();
    ::close(fd);
    ::unlink(tmp.c_str());
    io_failure("cannot write " + tmp + ": " + reason);
  }
  if (::close(fd) != 0) {
    const std::string reason = why();
    ::unlink(tmp.c_str());
    io_failure("cannot write " + tmp + ": " + reason);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = why();
    ::unlink(tmp.c_str());
    io_failure("cannot rename " + tmp + " to " + path + ": " + reason);
  }
  const size_t slash = path.find_last_of('/');
  fsync_dir(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)));
}

MappedFile::MappedFile(const std::string& path) {
  const int fd = open_read(path);
  size_ = open_size(path, fd);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const std::string reason = why();
      ::close(fd);
      size_ = 0;
      io_failure("cannot map " + path + ": " + reason);
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);   // the mapping keeps the file
}

MappedFile::MappedFile(MappedFile&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace ditskip
