// Batched decompression (cuMemBatchDecompressAsync): the batch goes to the executor's driver, which checks it and
// queues it on the stream, with a round trip because the driver names the operation it refused (errorIndex). Source,
// destination and actual-size addresses must be memory the executor's GPU reaches: device memory, or page-locked
// memory in a same-host session. Hardware decompression is a Blackwell feature; other GPUs' drivers refuse the batch
// (the H200's with CUDA_ERROR_NOT_SUPPORTED), and their answer is what the application gets.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// IntegerValue answers (schema/curelay.fbs, MemBatchDecompress).
constexpr int64_t kWholeBatch = -1;
constexpr int64_t kIndexNotSet = -2;

bool PaddingIsZero(const CUmemDecompressParams& params) {
  static constexpr unsigned char kZeros[sizeof params.padding] = {};
  return std::memcmp(params.padding, kZeros, sizeof kZeros) == 0;
}

}  // namespace

extern "C" {

// More than kMostDecompressions operations go in calls of that many, in order: one refused leaves the earlier
// calls' operations queued, and its errorIndex counts from the batch's start.
CUresult cuMemBatchDecompressAsync(CUmemDecompressParams* paramsArray, size_t count, unsigned int flags,
                                   size_t* errorIndex, CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  const StreamContextScope in_stream_context(*client, stream);
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (paramsArray == nullptr && count != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  // cuda.h: the padding "must be zeroed"; it does not travel, so a batch that sets it is refused here, before any
  // part of the batch is queued.
  for (size_t i = 0; i < count; ++i) {
    if (!PaddingIsZero(paramsArray[i])) {
      if (errorIndex != nullptr) *errorIndex = i;
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  size_t first = 0;
  do {  // a batch of none is the driver's to answer too
    const size_t entries = std::min<size_t>(count - first, wire::kMostDecompressions);
    std::vector<wire::DecompressOperation> operations;
    operations.reserve(entries);
    for (size_t i = first; i < first + entries; ++i) {
      const CUmemDecompressParams& params = paramsArray[i];
      operations.emplace_back(params.srcNumBytes, params.dstNumBytes,
                              reinterpret_cast<uint64_t>(params.dstActBytes), reinterpret_cast<uint64_t>(params.src),
                              reinterpret_cast<uint64_t>(params.dst), static_cast<uint32_t>(params.algo));
    }
    auto& builder = Builder();
    const auto call = wire::CreateMemBatchDecompress(builder, wire_stream, flags,
                                                     builder.CreateVectorOfStructs(operations))
                          .Union();
    ReplyMessage reply;
    const CUresult result = client->Call(builder, wire::Call::MemBatchDecompress, call, {}, &reply);
    if (result != CUDA_SUCCESS) {
      const auto* index = reply.reply != nullptr ? reply.reply->body_as_IntegerValue() : nullptr;
      if (index != nullptr && index->value() != kIndexNotSet) {
        if (index->value() != kWholeBatch && (index->value() < 0 || static_cast<uint64_t>(index->value()) >= entries)) {
          return CUDA_ERROR_UNKNOWN;  // an index outside what was sent: a malformed answer
        }
        if (errorIndex != nullptr) *errorIndex = index->value() == kWholeBatch ? SIZE_MAX : first + index->value();
      }
      return result;
    }
    first += entries;
  } while (first < count);
  return CUDA_SUCCESS;
}

}  // extern "C"
