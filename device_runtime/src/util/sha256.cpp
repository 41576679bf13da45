// SHA-256: OpenSSL's EVP interface (libcrypto) on Linux / Android, CommonCrypto on Apple platforms.
#include "util/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "util/failure.h"

#ifdef __APPLE__
#include <CommonCrypto/CommonDigest.h>
#else
#include <openssl/evp.h>
#endif

namespace ditskip {

#ifdef __APPLE__
struct Sha256::State {
  CC_SHA256_CTX ctx;
};

Sha256::Sha256() : state_(new State) { CC_SHA256_Init(&state_->ctx); }
Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {   // CC_LONG is 32-bit
    const CC_LONG n = size > (1u << 30) ? (1u << 30) : static_cast<CC_LONG>(size);
    CC_SHA256_Update(&state_->ctx, p, n);
    p += n;
    size -= n;
  }
}

std::string Sha256::hex_digest() {
  unsigned char md[CC_SHA256_DIGEST_LENGTH];
  CC_SHA256_Final(md, &state_->ctx);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : md) out += hex[b >> 4], out += hex[b & 0xF];
  return out;
}
#else
struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
  ~State() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : state_(new State) {
  state_->ctx = EVP_MD_CTX_new();
  if (state_->ctx == nullptr || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1)
    throw Failure(DITSKIP_INTERNAL_ERROR, "libcrypto: cannot start a SHA-256");
}
Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t size) {
  if (size > 0 && EVP_DigestUpdate(state_->ctx, data, size) != 1)
    throw Failure(DITSKIP_INTERNAL_ERROR, "libcrypto: SHA-256 update failed");
}

std::string Sha256::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(state_->ctx, md, &len) != 1 || len != 32)
    throw Failure(DITSKIP_INTERNAL_ERROR, "libcrypto: SHA-256 final failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int k = 0; k < len; ++k) out += hex[md[k] >> 4], out += hex[md[k] & 0xF];
  return out;
}
#endif

std::string sha256_hex(const void* data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.hex_digest();
}

std::string sha256_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_failure("cannot read " + path + ": " + std::strerror(errno));
  Sha256 h;
  std::vector<uint8_t> block(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      io_failure("cannot read " + path + ": " + reason);
    }
    if (n == 0) break;
    h.update(block.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return h.hex_digest();
}

}  // namespace ditskip
