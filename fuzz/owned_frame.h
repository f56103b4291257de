// A received frame as the harnesses hand it to product code: its own heap block of exactly its size, so reading
// past its end is a heap overflow that AddressSanitizer reports (and malloc's alignment is what a ZeroMQ message
// gives).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "transport/frame.h"

namespace curelay::fuzz {

inline transport::Frame OwnedFrame(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return {};
  auto* copy = new uint8_t[bytes.size()];
  std::memcpy(copy, bytes.data(), bytes.size());
  return transport::Frame({copy, bytes.size()}, copy, [](void* owner) { delete[] static_cast<uint8_t*>(owner); });
}

}  // namespace curelay::fuzz
