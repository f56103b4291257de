#include "backend/tenants/tenant_token.h"

#include <openssl/evp.h>
#include <sys/random.h>

#include <cstdint>

namespace curelay::backend {
namespace {

std::string Hex(const uint8_t* bytes, size_t count) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(count * 2);
  for (size_t i = 0; i < count; ++i) {
    text += kDigits[bytes[i] >> 4];
    text += kDigits[bytes[i] & 0xf];
  }
  return text;
}

}  // namespace

std::string NewTenantToken() {
  uint8_t secret[32];
  size_t filled = 0;
  while (filled < sizeof(secret)) {
    const ssize_t n = getrandom(secret + filled, sizeof(secret) - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  return "crl_" + Hex(secret, sizeof(secret));
}

std::string HashTenantToken(const std::string& token) {
  uint8_t digest[EVP_MAX_MD_SIZE];
  unsigned int digest_bytes = 0;
  EVP_Digest(token.data(), token.size(), digest, &digest_bytes, EVP_sha256(), nullptr);
  return Hex(digest, digest_bytes);
}

}  // namespace curelay::backend
