// Copies of bulk data the application receives from the GPU: the staging slot or reply frame is read once and the
// destination is not read back soon, so large copies store around the cache. Measured on the GPU host (H100
// host, one thread, 256 KiB to 4 MiB pieces from a shared staging file into anonymous memory): 7.0 GB/s with
// glibc's memcpy, 12-14 GB/s with non-temporal stores; the native driver's pageable device-to-host copies reach
// 11.6 GB/s. Host-to-device staging gains nothing from it (7.0-7.6 GB/s either way), so it is not used there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace curelay::frontend {

// Below this, the data is likely to be read soon and fits in the cache: an ordinary copy.
inline constexpr size_t kStreamingCopyMinBytes = size_t{256} << 10;

inline void CopyToApplication(void* destination, const void* source, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= kStreamingCopyMinBytes) {
    auto* out = static_cast<uint8_t*>(destination);
    const auto* in = static_cast<const uint8_t*>(source);
    // Non-temporal stores need a 16-byte aligned destination; the loads may be unaligned.
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(out) & 15)) & 15;
    std::memcpy(out, in, head);
    size_t done = head;
    for (; done + 64 <= bytes; done += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + done));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + done + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + done + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + done + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + done), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + done + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + done + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + done + 48), d);
    }
    std::memcpy(out + done, in + done, bytes - done);
    _mm_sfence();  // the stores are weakly ordered: visible before anything the caller does next
    return;
  }
#endif
  std::memcpy(destination, source, bytes);
}

}  // namespace curelay::frontend
