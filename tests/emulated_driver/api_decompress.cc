// Batched decompression (cuMemBatchDecompressAsync) on the emulated device, which plays a GPU with a decompression
// engine for Snappy only (device attributes MEM_DECOMPRESS_ALGORITHM_MASK = SNAPPY, MAXIMUM_LENGTH =
// kMaxDecompressLength): real decoding, so a forwarded batch's bytes can be checked. Fixture rules where the driver's
// behaviour is not documented: a malformed stream decodes to nothing (its actual size is 0, the batch succeeds), and
// an algorithm the engine lacks is refused with CUDA_ERROR_INVALID_VALUE and that operation's index.
#include <cstdint>
#include <cstring>
#include <vector>

#include "api_common.h"
#include "device_properties.h"

namespace curelay::emulated {
namespace {

// Raw Snappy (github.com/google/snappy, format_description.txt): a varint of the decoded length, then literals and
// back-references. False for anything malformed or longer than `capacity`.
bool DecodeSnappy(const uint8_t* in, size_t in_bytes, uint8_t* out, size_t capacity, size_t* written) {
  size_t at = 0;
  uint64_t expected = 0;
  for (int shift = 0;; shift += 7) {
    if (at >= in_bytes || shift > 28) return false;
    const uint8_t byte = in[at++];
    expected |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) break;
  }
  if (expected > capacity) return false;
  size_t produced = 0;
  while (at < in_bytes) {
    const uint8_t tag = in[at++];
    size_t length = 0, offset = 0;
    auto little_endian = [&](size_t bytes, size_t* value) {
      if (bytes > in_bytes - at) return false;
      *value = 0;
      for (size_t i = 0; i < bytes; ++i) *value |= static_cast<size_t>(in[at + i]) << (8 * i);
      at += bytes;
      return true;
    };
    switch (tag & 3) {
      case 0: {  // literal
        length = (tag >> 2) + 1u;
        if (length > 60) {
          if (!little_endian(length - 60, &length)) return false;
          ++length;
        }
        if (length > in_bytes - at || length > expected - produced) return false;
        std::memcpy(out + produced, in + at, length);
        at += length;
        produced += length;
        continue;
      }
      case 1:  // copy, 11-bit offset
        if (at >= in_bytes) return false;
        length = 4 + ((tag >> 2) & 7u);
        offset = (static_cast<size_t>(tag >> 5) << 8) | in[at++];
        break;
      case 2:  // copy, 16-bit offset
        length = (tag >> 2) + 1u;
        if (!little_endian(2, &offset)) return false;
        break;
      default:  // copy, 32-bit offset
        length = (tag >> 2) + 1u;
        if (!little_endian(4, &offset)) return false;
        break;
    }
    if (offset == 0 || offset > produced || length > expected - produced) return false;
    for (size_t i = 0; i < length; ++i) out[produced + i] = out[produced - offset + i];  // overlap repeats
    produced += length;
  }
  if (produced != expected) return false;
  *written = produced;
  return true;
}

struct Decompression {
  CUmemDecompressParams params;
  std::shared_ptr<Allocation> pins[3];  // src, dst, dstActBytes (null: registered host memory)
};

}  // namespace
}  // namespace curelay::emulated

namespace emu = curelay::emulated;

extern "C" {

CUresult CUDAAPI cuMemBatchDecompressAsync(CUmemDecompressParams* paramsArray, size_t count, unsigned int flags,
                                           size_t* errorIndex, CUstream stream) {
  return emu::Guard([&] {
    auto fail = [&](size_t index, CUresult result) {
      if (errorIndex != nullptr) *errorIndex = index;
      return result;
    };
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> resolved;
    if (CUresult r = emu::ResolveStream(stream, &ctx, &resolved); r != CUDA_SUCCESS) return fail(SIZE_MAX, r);
    if (flags != 0 || count == 0 || paramsArray == nullptr) return fail(SIZE_MAX, CUDA_ERROR_INVALID_VALUE);
    std::vector<emu::Decompression> batch(count);
    for (size_t i = 0; i < count; ++i) {
      const CUmemDecompressParams& params = paramsArray[i];
      static constexpr unsigned char kZeros[sizeof params.padding] = {};
      if (params.algo != CU_MEM_DECOMPRESS_ALGORITHM_SNAPPY) return fail(i, CUDA_ERROR_INVALID_VALUE);
      if (params.srcNumBytes == 0 || params.srcNumBytes > emu::kMaxDecompressLength ||
          params.dstNumBytes > emu::kMaxDecompressLength ||
          std::memcmp(params.padding, kZeros, sizeof kZeros) != 0 ||
          reinterpret_cast<uintptr_t>(params.dstActBytes) % alignof(cuuint32_t) != 0) {
        return fail(i, CUDA_ERROR_INVALID_VALUE);
      }
      auto& entry = batch[i];
      entry.params = params;
      if (emu::ValidateDeviceRange(reinterpret_cast<uint64_t>(params.src), params.srcNumBytes, &entry.pins[0]) !=
              CUDA_SUCCESS ||
          (params.dstNumBytes != 0 &&
           emu::ValidateDeviceRange(reinterpret_cast<uint64_t>(params.dst), params.dstNumBytes, &entry.pins[1]) !=
               CUDA_SUCCESS) ||
          emu::ValidateDeviceRange(reinterpret_cast<uint64_t>(params.dstActBytes), sizeof(cuuint32_t),
                                   &entry.pins[2]) != CUDA_SUCCESS) {
        return fail(i, CUDA_ERROR_INVALID_VALUE);
      }
    }
    emu::SubmitOp(ctx, resolved.get(), [batch = std::move(batch)] {
      for (const auto& entry : batch) {
        const auto& params = entry.params;
        size_t written = 0;
        if (!emu::DecodeSnappy(static_cast<const uint8_t*>(params.src), params.srcNumBytes,
                               static_cast<uint8_t*>(params.dst), params.dstNumBytes, &written)) {
          written = 0;
        }
        const auto actual = static_cast<cuuint32_t>(written);
        std::memcpy(params.dstActBytes, &actual, sizeof actual);
      }
      return CUDA_SUCCESS;
    });
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
