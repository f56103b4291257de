#include "transport/lanes/libcrypto_api.h"

#include <dlfcn.h>
#include <openssl/crypto.h>

#include <mutex>

namespace curelay::transport {
namespace {

template <typename Function>
bool Bind(void* library, const char* name, Function*& slot) {
  slot = reinterpret_cast<Function*>(dlsym(library, name));
  return slot != nullptr;
}

}  // namespace

const LibcryptoApi* LoadLibcryptoApi() {
  static LibcryptoApi api;
  static const LibcryptoApi* loaded = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    // RTLD_LOCAL: nothing of it becomes visible to the application's own lookups. If the application has loaded
    // libcrypto.so.3 itself, this is the same instance (OpenSSL 3 is safe to share between threads and users).
    void* library = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return;
    // Initialized by us first, libcrypto would register its cleanup with atexit, and exit handlers run newest first:
    // an application's earlier handler that makes CUDA calls (the shim serves them) would then set up lanes on a
    // libcrypto already torn down, and crash. So no atexit cleanup (if the application initialized libcrypto
    // before, this changes nothing).
    int (*init_crypto)(uint64_t, const OPENSSL_INIT_SETTINGS*) = nullptr;
    if (!Bind(library, "OPENSSL_init_crypto", init_crypto) || init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) != 1) {
      dlclose(library);
      return;
    }
    const bool bound = Bind(library, "EVP_CIPHER_CTX_new", api.cipher_ctx_new) &&
                       Bind(library, "EVP_CIPHER_CTX_free", api.cipher_ctx_free) &&
                       Bind(library, "EVP_aes_256_gcm", api.aes_256_gcm) &&
                       Bind(library, "EVP_chacha20_poly1305", api.chacha20_poly1305) &&
                       Bind(library, "EVP_CipherInit_ex", api.cipher_init_ex) &&
                       Bind(library, "EVP_CipherUpdate", api.cipher_update) &&
                       Bind(library, "EVP_CipherFinal_ex", api.cipher_final_ex) &&
                       Bind(library, "EVP_CIPHER_CTX_ctrl", api.cipher_ctx_ctrl);
    if (!bound) {
      dlclose(library);
      return;
    }
    loaded = &api;  // the library stays loaded for the process's life: ciphers may be in use until exit
  });
  return loaded;
}

}  // namespace curelay::transport
