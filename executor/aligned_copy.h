// Request payloads sit at any offset in a frame; ELF images and argument buffers are read with aligned loads.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace curelay::executor {

// Copies bytes into 8-byte aligned storage and returns it.
inline const void* Aligned(std::span<const uint8_t> bytes, std::vector<uint64_t>& storage) {
  storage.resize((bytes.size() + sizeof(uint64_t) - 1) / sizeof(uint64_t));
  std::memcpy(storage.data(), bytes.data(), bytes.size());
  return storage.data();
}

}  // namespace curelay::executor
