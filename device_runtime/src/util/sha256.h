// SHA-256 through the platform's crypto library: OpenSSL's libcrypto (Linux, Android builds of it), CommonCrypto on
// Apple platforms. Lowercase hex digests, as the manifest stores them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ditskip {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  std::string hex_digest();          // finishes the hash; call once

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string sha256_hex(const void* data, size_t size);
inline std::string sha256_hex(const std::string& s) { return sha256_hex(s.data(), s.size()); }
std::string sha256_file(const std::string& path);    // streamed in 1 MiB blocks; io_failure if unreadable

}  // namespace ditskip
