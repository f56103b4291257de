// Sealed lanes: a CURVE session's bulk payloads travel on tcp lanes encrypted and authenticated by an AEAD, with
// keys derived from the session's lane secret (which crossed inside the CURVE-encrypted attach answer). Why lanes
// and not the ZeroMQ connection: CURVE encrypts one connection on one core (about half a GB/s on the GPU host);
// lanes spread the cipher over one thread per lane and direction.
//
// Each lane and direction has its own key, and each sealed piece its own nonce: a counter both ends keep, never sent.
// A piece replayed, dropped, reordered, moved to another lane or direction, or altered therefore fails to open, and
// the lane breaks (the session ends). docs/security.md and docs/protocol.md describe it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace curelay::transport {

enum class LaneCipher : uint8_t {
  kAes256Gcm,          // where the CPU has AES-NI and carry-less multiply (libsodium needs both)
  kChaCha20Poly1305,   // everywhere else (IETF variant)
};

inline constexpr size_t kLaneSecretBytes = 32;
using LaneSecret = std::array<uint8_t, kLaneSecretBytes>;

// Which library runs the cipher; the bytes on the wire are the same either way.
enum class LaneCryptoLibrary : uint8_t {
  kLibcrypto,  // OpenSSL's, loaded at run time where there is one (libcrypto_api.h): the faster
  kLibsodium,  // linked in, always there (AES-256-GCM only with AES-NI)
};

std::string_view LaneCipherName(LaneCipher cipher);
std::optional<LaneCipher> ParseLaneCipher(std::string_view name);
std::string_view LaneCryptoLibraryName(LaneCryptoLibrary library);
// Whether this process can run `cipher` with some library (with `library`, when given). AES-256-GCM only where
// the CPU accelerates it (AES-NI and carry-less multiply, as libsodium judges it), whichever library: elsewhere
// ChaCha20-Poly1305 is faster, and software AES is open to timing attacks.
bool LaneCipherAvailable(LaneCipher cipher, std::optional<LaneCryptoLibrary> library = std::nullopt);
// AES-256-GCM where it is available, else ChaCha20-Poly1305.
LaneCipher PreferredLaneCipher();

// What a lane presents in its hello in place of the secret itself, which must not cross the wire in the clear:
// a key derived from the secret for that lane (revealing it reveals nothing of the payload keys).
LaneSecret LaneHelloToken(const LaneSecret& secret, int lane);

// One direction of one lane. The cipher must be available (LaneCipherAvailable). Runs on libcrypto where it loads
// and runs the cipher, else on libsodium; `library` = libsodium skips libcrypto (tests, and the cipher bench).
class LaneSeal {
 public:
  static constexpr size_t kTagBytes = 16;
  LaneSeal(LaneCipher cipher, const LaneSecret& secret, int lane, bool client_to_executor,
           std::optional<LaneCryptoLibrary> library = std::nullopt);
  ~LaneSeal();
  LaneSeal(const LaneSeal&) = delete;
  LaneSeal& operator=(const LaneSeal&) = delete;

  LaneCryptoLibrary library() const { return evp_ != nullptr ? LaneCryptoLibrary::kLibcrypto : LaneCryptoLibrary::kLibsodium; }

  // Encrypts `size` bytes of `in` into `out` (they may be the same) and writes the tag; uses the next nonce. False
  // only if the library fails (the lane then breaks).
  bool Seal(const uint8_t* in, uint8_t* out, size_t size, uint8_t* tag);
  // Decrypts `data` in place if `tag` proves it is the next piece this direction sealed; false otherwise, with the
  // data zeroed (libcrypto decrypts before it checks: nothing of a forged piece's plaintext is left behind). Either
  // way the nonce moves on: a lane that failed once is broken.
  bool Open(uint8_t* data, size_t size, const uint8_t* tag);

 private:
  void NextNonce(uint8_t* nonce);
  bool LibcryptoPass(bool encrypt, const uint8_t* nonce, const uint8_t* in, uint8_t* out, size_t size, uint8_t* tag);
  LaneCipher cipher_;
  uint64_t counter_ = 0;
  void* evp_ = nullptr;  // libcrypto's EVP_CIPHER_CTX, keyed; null: libsodium
  alignas(16) unsigned char state_[512];  // libsodium's expanded AES key, or the ChaCha20 key in its first 32 bytes
};

}  // namespace curelay::transport
