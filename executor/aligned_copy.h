// Request payloads sit at any offset in a frame; ELF images and argument buffers are read with aligned loads.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace curelay::executor {

// Copies bytes into 8-byte aligned storage, followed by at least one zero byte, and returns it. The zero matters for
// module images: a PTX image is text that the driver reads up to its NUL, so a payload without one must not make
// the driver read past the buffer (found by session_fuzzer, as was the null source of an empty payload).
inline const void* Aligned(std::span<const uint8_t> bytes, std::vector<uint64_t>& storage) {
  storage.assign(bytes.size() / sizeof(uint64_t) + 1, 0);
  if (!bytes.empty()) std::memcpy(storage.data(), bytes.data(), bytes.size());
  return storage.data();
}

}  // namespace curelay::executor
