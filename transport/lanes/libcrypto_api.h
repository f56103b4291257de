// The few OpenSSL calls sealed lanes make, through one table filled from dlopen("libcrypto.so.3") the first time a
// sealed lane needs a cipher. Why OpenSSL beside libsodium: its AES-256-GCM and ChaCha20-Poly1305 run 2-2.5 times
// faster per core than libsodium 1.0.18's (docs/security.md), and a sealed lane's throughput is its cipher's. Why
// loaded, not linked: the shim depends on glibc alone; a process without libcrypto.so.3 seals with libsodium, which
// is linked statically and speaks the same ciphers (the bytes on the wire do not depend on the library).
#pragma once

#include <openssl/evp.h>

namespace curelay::transport {

struct LibcryptoApi {
  EVP_CIPHER_CTX* (*cipher_ctx_new)();
  void (*cipher_ctx_free)(EVP_CIPHER_CTX* context);
  const EVP_CIPHER* (*aes_256_gcm)();
  const EVP_CIPHER* (*chacha20_poly1305)();
  int (*cipher_init_ex)(EVP_CIPHER_CTX* context, const EVP_CIPHER* cipher, ENGINE* engine, const unsigned char* key,
                        const unsigned char* iv, int encrypt);
  int (*cipher_update)(EVP_CIPHER_CTX* context, unsigned char* out, int* out_size, const unsigned char* in,
                       int in_size);
  int (*cipher_final_ex)(EVP_CIPHER_CTX* context, unsigned char* out, int* out_size);
  int (*cipher_ctx_ctrl)(EVP_CIPHER_CTX* context, int type, int argument, void* pointer);
};

// The process's table, loaded once (thread-safe); null when libcrypto.so.3 cannot be loaded or lacks a symbol.
const LibcryptoApi* LoadLibcryptoApi();

}  // namespace curelay::transport
