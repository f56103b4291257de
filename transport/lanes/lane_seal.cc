// LaneSeal over libcrypto (loaded at run time, libcrypto_api.h) or libsodium (linked statically, as for ZeroMQ's
// CURVE): AES-256-GCM or ChaCha20-Poly1305, keys from crypto_kdf (BLAKE2b) over the session's lane secret.
#include "transport/lanes/lane_seal.h"

#include <sodium.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "transport/lanes/libcrypto_api.h"

namespace curelay::transport {
namespace {

constexpr char kKdfContext[crypto_kdf_CONTEXTBYTES + 1] = "curelane";
// Subkey numbers: a payload key per lane and direction; the hello tokens from kHelloTokenBase on.
constexpr uint64_t kHelloTokenBase = 1u << 16;

static_assert(sizeof(crypto_aead_aes256gcm_state) <= 512, "LaneSeal::state_ holds the expanded AES key");
static_assert(crypto_aead_aes256gcm_NPUBBYTES == 12 && crypto_aead_chacha20poly1305_ietf_NPUBBYTES == 12);
static_assert(crypto_aead_aes256gcm_ABYTES == LaneSeal::kTagBytes &&
              crypto_aead_chacha20poly1305_ietf_ABYTES == LaneSeal::kTagBytes);
static_assert(crypto_kdf_KEYBYTES == kLaneSecretBytes);

void InitSodium() {
  // Thread-safe and idempotent; fails only when the system has no randomness source, which getrandom gave us.
  if (sodium_init() < 0) std::abort();
}

void Derive(const LaneSecret& secret, uint64_t id, unsigned char* key, size_t size) {
  InitSodium();
  crypto_kdf_derive_from_key(key, size, id, kKdfContext, secret.data());
}

bool SodiumRuns(LaneCipher cipher) {
  InitSodium();
  return cipher == LaneCipher::kChaCha20Poly1305 || crypto_aead_aes256gcm_is_available() == 1;
}

// A libcrypto context keyed for `cipher`, or null (no libcrypto, or it refuses the cipher: a FIPS-only provider
// refuses ChaCha20-Poly1305, say).
EVP_CIPHER_CTX* LibcryptoContext(LaneCipher cipher, const unsigned char* key) {
  const LibcryptoApi* api = LoadLibcryptoApi();
  if (api == nullptr) return nullptr;
  const EVP_CIPHER* kind = cipher == LaneCipher::kAes256Gcm ? api->aes_256_gcm() : api->chacha20_poly1305();
  EVP_CIPHER_CTX* context = kind != nullptr ? api->cipher_ctx_new() : nullptr;
  if (context == nullptr) return nullptr;
  if (api->cipher_init_ex(context, kind, nullptr, key, nullptr, 1) != 1) {
    api->cipher_ctx_free(context);
    return nullptr;
  }
  return context;
}

}  // namespace

std::string_view LaneCipherName(LaneCipher cipher) {
  return cipher == LaneCipher::kAes256Gcm ? "aes256gcm" : "chacha20poly1305";
}

std::optional<LaneCipher> ParseLaneCipher(std::string_view name) {
  if (name == "aes256gcm") return LaneCipher::kAes256Gcm;
  if (name == "chacha20poly1305") return LaneCipher::kChaCha20Poly1305;
  return std::nullopt;
}

std::string_view LaneCryptoLibraryName(LaneCryptoLibrary library) {
  return library == LaneCryptoLibrary::kLibcrypto ? "libcrypto" : "libsodium";
}

bool LaneCipherAvailable(LaneCipher cipher, std::optional<LaneCryptoLibrary> library) {
  if (!SodiumRuns(cipher)) return false;  // AES without AES-NI: not with libcrypto either (lane_seal.h)
  const auto libcrypto_runs = [cipher] {
    const unsigned char probe_key[32] = {};
    EVP_CIPHER_CTX* context = LibcryptoContext(cipher, probe_key);
    if (context != nullptr) LoadLibcryptoApi()->cipher_ctx_free(context);
    return context != nullptr;
  };
  return library != LaneCryptoLibrary::kLibcrypto || libcrypto_runs();
}

LaneCipher PreferredLaneCipher() {
  return LaneCipherAvailable(LaneCipher::kAes256Gcm) ? LaneCipher::kAes256Gcm : LaneCipher::kChaCha20Poly1305;
}

LaneSecret LaneHelloToken(const LaneSecret& secret, int lane) {
  LaneSecret token;
  Derive(secret, kHelloTokenBase + static_cast<uint64_t>(lane), token.data(), token.size());
  return token;
}

LaneSeal::LaneSeal(LaneCipher cipher, const LaneSecret& secret, int lane, bool client_to_executor,
                   std::optional<LaneCryptoLibrary> library)
    : cipher_(cipher) {
  unsigned char key[32];
  Derive(secret, 2 * static_cast<uint64_t>(lane) + (client_to_executor ? 0 : 1), key, sizeof(key));
  if (library != LaneCryptoLibrary::kLibsodium) evp_ = LibcryptoContext(cipher_, key);
  if (evp_ == nullptr) {  // libsodium runs every available cipher (LaneCipherAvailable)
    if (cipher_ == LaneCipher::kAes256Gcm) {
      crypto_aead_aes256gcm_beforenm(reinterpret_cast<crypto_aead_aes256gcm_state*>(state_), key);
    } else {
      std::memcpy(state_, key, sizeof(key));
    }
  }
  sodium_memzero(key, sizeof(key));
}

LaneSeal::~LaneSeal() {
  if (evp_ != nullptr) LoadLibcryptoApi()->cipher_ctx_free(static_cast<EVP_CIPHER_CTX*>(evp_));  // wipes the key
  sodium_memzero(state_, sizeof(state_));
}

void LaneSeal::NextNonce(uint8_t* nonce) {
  std::memset(nonce, 0, 12);
  const uint64_t counter = counter_++;
  for (int byte = 0; byte < 8; ++byte) nonce[byte] = static_cast<uint8_t>(counter >> (8 * byte));
}

bool LaneSeal::LibcryptoPass(bool encrypt, const uint8_t* nonce, const uint8_t* in, uint8_t* out, size_t size,
                             uint8_t* tag) {
  const LibcryptoApi& api = *LoadLibcryptoApi();
  auto* context = static_cast<EVP_CIPHER_CTX*>(evp_);
  int written = 0, finished = 0;
  // The key stays; the nonce and the direction are set anew. Decrypting, the tag goes in first and Final checks it;
  // encrypting, it comes out after Final.
  return size <= INT_MAX && api.cipher_init_ex(context, nullptr, nullptr, nullptr, nonce, encrypt ? 1 : 0) == 1 &&
         (encrypt || api.cipher_ctx_ctrl(context, EVP_CTRL_AEAD_SET_TAG, kTagBytes, tag) == 1) &&
         api.cipher_update(context, out, &written, in, static_cast<int>(size)) == 1 &&
         api.cipher_final_ex(context, out + written, &finished) == 1 &&
         (!encrypt || api.cipher_ctx_ctrl(context, EVP_CTRL_AEAD_GET_TAG, kTagBytes, tag) == 1);
}

bool LaneSeal::Seal(const uint8_t* in, uint8_t* out, size_t size, uint8_t* tag) {
  uint8_t nonce[12];
  NextNonce(nonce);
  if (evp_ != nullptr) return LibcryptoPass(true, nonce, in, out, size, tag);
  unsigned long long tag_size = 0;
  if (cipher_ == LaneCipher::kAes256Gcm) {
    crypto_aead_aes256gcm_encrypt_detached_afternm(out, tag, &tag_size, in, size, nullptr, 0, nullptr, nonce,
                                                   reinterpret_cast<const crypto_aead_aes256gcm_state*>(state_));
  } else {
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(out, tag, &tag_size, in, size, nullptr, 0, nullptr, nonce,
                                                       state_);
  }
  return true;
}

bool LaneSeal::Open(uint8_t* data, size_t size, const uint8_t* tag) {
  uint8_t nonce[12];
  NextNonce(nonce);
  bool opened;
  if (evp_ != nullptr) {
    opened = LibcryptoPass(false, nonce, data, data, size, const_cast<uint8_t*>(tag));  // Final: 1 only if it matches
  } else if (cipher_ == LaneCipher::kAes256Gcm) {
    opened = crypto_aead_aes256gcm_decrypt_detached_afternm(
                 data, nullptr, data, size, tag, nullptr, 0, nonce,
                 reinterpret_cast<const crypto_aead_aes256gcm_state*>(state_)) == 0;
  } else {
    opened = crypto_aead_chacha20poly1305_ietf_decrypt_detached(data, nullptr, data, size, tag, nullptr, 0, nonce,
                                                                state_) == 0;
  }
  if (!opened) sodium_memzero(data, size);
  return opened;
}

}  // namespace curelay::transport
