// One core's sealing and opening rate for each cipher and library sealed lanes can use (transport/lanes/lane_seal.h),
// in 64 KiB pieces as the lanes seal them: the ceiling of one sealed lane, since a lane's thread seals (or opens)
// every byte it carries. Prints METRIC lines (bench/README.md).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "transport/lanes/lane_seal.h"

using curelay::transport::LaneCipher;
using curelay::transport::LaneCryptoLibrary;
using curelay::transport::LaneSeal;

int main() {
  constexpr size_t kPiece = size_t{64} << 10;
  constexpr size_t kTotal = size_t{1} << 30;
  std::vector<uint8_t> plain(kPiece, 0x5a), sealed(kPiece);
  std::vector<std::vector<uint8_t>> tags(kTotal / kPiece, std::vector<uint8_t>(LaneSeal::kTagBytes));
  curelay::transport::LaneSecret secret{};
  for (const LaneCipher cipher : {LaneCipher::kAes256Gcm, LaneCipher::kChaCha20Poly1305}) {
    for (const LaneCryptoLibrary library : {LaneCryptoLibrary::kLibcrypto, LaneCryptoLibrary::kLibsodium}) {
      const std::string name = std::string(curelay::transport::LaneCipherName(cipher)) + "_" +
                               std::string(curelay::transport::LaneCryptoLibraryName(library));
      if (!curelay::transport::LaneCipherAvailable(cipher, library)) {
        std::printf("INFO %s not available here\n", name.c_str());
        continue;
      }
      LaneSeal sealing(cipher, secret, 0, true, library), opening(cipher, secret, 0, true, library);
      // Sealing out of place (the sender's pass), then opening in place (the receiver's): the same pieces, so the
      // opening checks every tag too.
      auto start = std::chrono::steady_clock::now();
      for (size_t piece = 0; piece < tags.size(); ++piece) sealing.Seal(plain.data(), sealed.data(), kPiece, tags[piece].data());
      const double seal_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      LaneSeal resealing(cipher, secret, 0, true, library);
      size_t failed = 0;
      double open_s = 0;
      for (size_t piece = 0; piece < tags.size(); ++piece) {
        resealing.Seal(plain.data(), sealed.data(), kPiece, tags[piece].data());
        start = std::chrono::steady_clock::now();
        failed += opening.Open(sealed.data(), kPiece, tags[piece].data()) ? 0 : 1;
        open_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      std::printf("METRIC lane_seal_%s %.3f GB/s\n", name.c_str(), kTotal / seal_s / 1e9);
      std::printf("METRIC lane_open_%s %.3f GB/s\n", name.c_str(), kTotal / open_s / 1e9);
      if (failed != 0) {
        std::printf("FAIL %zu pieces of %s did not open\n", failed, name.c_str());
        return 1;
      }
    }
  }
  return 0;
}
