// Stream memory operations: waits on and writes of 32- and 64-bit values in device memory (or mapped host memory),
// in stream order. Posted, as the driver queues them; the executor's driver checks them (alignment, the device's
// support for 64-bit operations and NOR waits) and a failure surfaces at the next synchronizing call.
#include <vector>

#include "frontend/api/api_support.h"
#include "schema/memory_operations.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult PostOperations(CUstream stream, const std::vector<wire::MemoryOperation>& operations) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  auto& builder = Builder();
  const auto call =
      wire::CreateStreamMemoryOperations(builder, wire_stream, builder.CreateVectorOfStructs(operations)).Union();
  return client->Post(builder, wire::Call::StreamMemoryOperations, call, {});
}

CUresult Single(CUstream stream, CUstreamBatchMemOpType operation, CUdeviceptr address, uint64_t value,
                unsigned int flags) {
  if (address == 0) return CUDA_ERROR_INVALID_VALUE;
  return PostOperations(stream, {wire::MemoryOperation(operation, flags, address, value)});
}

}  // namespace

extern "C" {

CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr address, cuuint32_t value, unsigned int flags) {
  return Single(stream, CU_STREAM_MEM_OP_WAIT_VALUE_32, address, value, flags);
}
CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr address, cuuint64_t value, unsigned int flags) {
  return Single(stream, CU_STREAM_MEM_OP_WAIT_VALUE_64, address, value, flags);
}
CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr address, cuuint32_t value, unsigned int flags) {
  return Single(stream, CU_STREAM_MEM_OP_WRITE_VALUE_32, address, value, flags);
}
CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr address, cuuint64_t value, unsigned int flags) {
  return Single(stream, CU_STREAM_MEM_OP_WRITE_VALUE_64, address, value, flags);
}

CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* params,
                               unsigned int flags) {
  if (count == 0 || count > wire::kMostMemoryOperations || params == nullptr || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<wire::MemoryOperation> operations(count);
  for (unsigned int i = 0; i < count; ++i) {
    if (!wire::EncodeMemoryOperation(params[i], &operations[i])) return CUDA_ERROR_INVALID_VALUE;
  }
  return PostOperations(stream, operations);
}

// The exported names without _v2 are the CUDA 11 forms: the same arguments.
CUresult cuStreamWaitValue32_v1(CUstream stream, CUdeviceptr address, cuuint32_t value, unsigned int flags)
    __asm__("cuStreamWaitValue32");
CUresult cuStreamWaitValue32_v1(CUstream stream, CUdeviceptr address, cuuint32_t value, unsigned int flags) {
  return cuStreamWaitValue32_v2(stream, address, value, flags);
}
CUresult cuStreamWaitValue64_v1(CUstream stream, CUdeviceptr address, cuuint64_t value, unsigned int flags)
    __asm__("cuStreamWaitValue64");
CUresult cuStreamWaitValue64_v1(CUstream stream, CUdeviceptr address, cuuint64_t value, unsigned int flags) {
  return cuStreamWaitValue64_v2(stream, address, value, flags);
}
CUresult cuStreamWriteValue32_v1(CUstream stream, CUdeviceptr address, cuuint32_t value, unsigned int flags)
    __asm__("cuStreamWriteValue32");
CUresult cuStreamWriteValue32_v1(CUstream stream, CUdeviceptr address, cuuint32_t value, unsigned int flags) {
  return cuStreamWriteValue32_v2(stream, address, value, flags);
}
CUresult cuStreamWriteValue64_v1(CUstream stream, CUdeviceptr address, cuuint64_t value, unsigned int flags)
    __asm__("cuStreamWriteValue64");
CUresult cuStreamWriteValue64_v1(CUstream stream, CUdeviceptr address, cuuint64_t value, unsigned int flags) {
  return cuStreamWriteValue64_v2(stream, address, value, flags);
}
CUresult cuStreamBatchMemOp_v1(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* params,
                               unsigned int flags) __asm__("cuStreamBatchMemOp");
CUresult cuStreamBatchMemOp_v1(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* params,
                               unsigned int flags) {
  return cuStreamBatchMemOp_v2(stream, count, params, flags);
}

}  // extern "C"
