// Batches of copies (cuMemcpyBatchAsync, cuMemcpy3DBatchAsync): the batch is checked as the driver checks it, then
// each copy runs as the single asynchronous copy of its kind (cuMemcpyAsync, cuMemcpy3DAsync) on the batch's
// stream, so every kind of host memory takes the path it takes there (pageable bytes captured in the message or
// staged, same-host page-locked memory as one DMA, remote page-locked memory through its mirror), and a copy the
// executor cannot reach answers as the single copy does. In stream order one after another, they satisfy the
// batch's contract (the batch in stream order, no order promised within it).
#include <cstdint>
#include <vector>

#include "common/array_format.h"
#include "frontend/api/api_support.h"
#include "frontend/api/strided_copy.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

constexpr size_t kNoCopy = SIZE_MAX;  // failIdx when an error concerns no one copy

// cuda.h: "Must not be legacy NULL stream" (the null stream of a per-thread form is the thread's own).
bool LegacyStream(CUstream stream) {
  return stream == CU_STREAM_LEGACY || (stream == nullptr && !NullStreamIsPerThread());
}

bool ValidAccessOrder(CUmemcpySrcAccessOrder order) {
  return order == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM || order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL ||
         order == CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
}

bool ValidCopyFlags(unsigned int flags) { return (flags & ~CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE) == 0; }

CUresult Fail(size_t* fail_index, size_t index, CUresult result) {
  if (fail_index != nullptr) *fail_index = index;
  return result;
}

// A source read "during the API call" must be read before the batch returns. Pageable bytes are (they travel in the
// request, or the staged copy waits for its DMA); page-locked memory the executor reads by DMA later is not, so
// the batch waits for its stream when it holds such a copy (not while the stream is being captured: nothing runs).
CUresult FinishSourcesReadDuringCall(bool wait, CUstream stream) {
  if (!wait) return CUDA_SUCCESS;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CURELAY_RETURN_IF_ERROR(cuStreamIsCapturing(stream, &status));
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  return cuStreamSynchronize(stream);
}

CUresult MemcpyBatch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
                     size_t* attr_indices, size_t attr_count, size_t* fail_index, CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (fail_index != nullptr) *fail_index = kNoCopy;
  if (dsts == nullptr || srcs == nullptr || sizes == nullptr || count == 0 || attrs == nullptr ||
      attr_indices == nullptr || attr_count == 0 || attr_count > count || LegacyStream(stream)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // attrIdxs: 0 first, strictly increasing, all below count.
  for (size_t k = 0; k < attr_count; ++k) {
    if ((k == 0 && attr_indices[0] != 0) || (k > 0 && attr_indices[k] <= attr_indices[k - 1]) ||
        attr_indices[k] >= count) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (!ValidAccessOrder(attrs[k].srcAccessOrder) || !ValidCopyFlags(attrs[k].flags)) {
      return Fail(fail_index, attr_indices[k], CUDA_ERROR_INVALID_VALUE);
    }
  }
  bool wait = false;
  size_t k = 0;
  for (size_t i = 0; i < count; ++i) {
    while (k + 1 < attr_count && attr_indices[k + 1] <= i) ++k;
    const CUresult result = cuMemcpyAsync(dsts[i], srcs[i], sizes[i], stream);
    if (result != CUDA_SUCCESS) return Fail(fail_index, i, result);
    if (attrs[k].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL && sizes[i] != 0 &&
        IsClientHostAllocation(*client, reinterpret_cast<const void*>(srcs[i]))) {
      wait = true;
    }
  }
  return FinishSourcesReadDuringCall(wait, stream);
}

// A batch operand as one side of a CUDA_MEMCPY3D; `element_bytes` is the copy's element size.
CUresult DescribeOperand(Client& client, const CUmemcpy3DOperand& operand, const CUextent3D& extent,
                         size_t element_bytes, CUmemorytype* type, CUdeviceptr* device, CUarray* array, size_t* x,
                         size_t* y, size_t* z, size_t* pitch, size_t* height) {
  switch (operand.type) {
    case CU_MEMCPY_OPERAND_TYPE_POINTER: {
      // A row length or layer height of 0 is tightly packed by the extent; a non-zero one may not be smaller.
      const size_t row_length = operand.op.ptr.rowLength != 0 ? operand.op.ptr.rowLength : extent.width;
      const size_t layer_height = operand.op.ptr.layerHeight != 0 ? operand.op.ptr.layerHeight : extent.height;
      if (row_length < extent.width || layer_height < extent.height) return CUDA_ERROR_INVALID_VALUE;
      *type = CU_MEMORYTYPE_UNIFIED;  // device or host memory, told apart as for cuMemcpy3D's unified sides
      *device = operand.op.ptr.ptr;
      *pitch = row_length * element_bytes;
      *height = layer_height;
      return CUDA_SUCCESS;
    }
    case CU_MEMCPY_OPERAND_TYPE_ARRAY:
      if (!client.arrays.Contains(operand.op.array.array)) return CUDA_ERROR_INVALID_VALUE;
      *type = CU_MEMORYTYPE_ARRAY;
      *array = operand.op.array.array;
      *x = operand.op.array.offset.x * element_bytes;
      *y = operand.op.array.offset.y;
      *z = operand.op.array.offset.z;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

size_t OperandElementBytes(const CUmemcpy3DOperand& operand) {
  if (operand.type != CU_MEMCPY_OPERAND_TYPE_ARRAY || operand.op.array.array == nullptr) return 0;
  const CUDA_ARRAY3D_DESCRIPTOR& descriptor = operand.op.array.array->descriptor;
  return ArrayElementBytes(descriptor.Format, descriptor.NumChannels);
}

// One operation of a 3D batch as the CUDA_MEMCPY3D it is: elements are bytes between pointers, and the array's
// elements where one side is an array (two arrays must agree).
CUresult DescribeOperation(Client& client, const CUDA_MEMCPY3D_BATCH_OP& operation, CUDA_MEMCPY3D* copy) {
  const CUextent3D& extent = operation.extent;
  if (extent.width == 0 || extent.height == 0 || extent.depth == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidAccessOrder(operation.srcAccessOrder) || !ValidCopyFlags(operation.flags)) return CUDA_ERROR_INVALID_VALUE;
  for (const CUmemcpy3DOperand* operand : {&operation.src, &operation.dst}) {
    if (operand->type == CU_MEMCPY_OPERAND_TYPE_ARRAY && !client.arrays.Contains(operand->op.array.array)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const size_t src_element = OperandElementBytes(operation.src);
  const size_t dst_element = OperandElementBytes(operation.dst);
  if (src_element != 0 && dst_element != 0 && src_element != dst_element) return CUDA_ERROR_INVALID_VALUE;
  const size_t element_bytes = src_element != 0 ? src_element : dst_element != 0 ? dst_element : 1;
  *copy = CUDA_MEMCPY3D{};
  CURELAY_RETURN_IF_ERROR(DescribeOperand(client, operation.src, extent, element_bytes, &copy->srcMemoryType,
                                          &copy->srcDevice, &copy->srcArray, &copy->srcXInBytes, &copy->srcY,
                                          &copy->srcZ, &copy->srcPitch, &copy->srcHeight));
  CURELAY_RETURN_IF_ERROR(DescribeOperand(client, operation.dst, extent, element_bytes, &copy->dstMemoryType,
                                          &copy->dstDevice, &copy->dstArray, &copy->dstXInBytes, &copy->dstY,
                                          &copy->dstZ, &copy->dstPitch, &copy->dstHeight));
  copy->WidthInBytes = extent.width * element_bytes;
  copy->Height = extent.height;
  copy->Depth = extent.depth;
  return CUDA_SUCCESS;
}

CUresult Memcpy3DBatch(size_t count, CUDA_MEMCPY3D_BATCH_OP* operations, size_t* fail_index,
                       unsigned long long flags, CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (fail_index != nullptr) *fail_index = kNoCopy;
  if (count == 0 || operations == nullptr || flags != 0 || LegacyStream(stream)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUDA_MEMCPY3D> copies(count);
  for (size_t i = 0; i < count; ++i) {
    const CUresult described = DescribeOperation(*client, operations[i], &copies[i]);
    if (described != CUDA_SUCCESS) return Fail(fail_index, i, described);
  }
  bool wait = false;
  for (size_t i = 0; i < count; ++i) {
    const CUresult result = cuMemcpy3DAsync(&copies[i], stream);
    if (result != CUDA_SUCCESS) return Fail(fail_index, i, result);
    if (operations[i].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
        copies[i].srcMemoryType == CU_MEMORYTYPE_UNIFIED &&
        IsClientHostAllocation(*client, reinterpret_cast<const void*>(copies[i].srcDevice))) {
      wait = true;
    }
  }
  return FinishSourcesReadDuringCall(wait, stream);
}

}  // namespace

extern "C" {

// cuda.h's cuMemcpyBatchAsync is cuMemcpyBatchAsync_v2 (CUDA 13, without failIdx).
CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                            CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream hStream) {
  return MemcpyBatch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream);
}

// The CUDA 12.8 form, with failIdx.
CUresult cuMemcpyBatchAsync_v1(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                               CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                               CUstream hStream) __asm__("cuMemcpyBatchAsync");
CUresult cuMemcpyBatchAsync_v1(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                               CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                               CUstream hStream) {
  return MemcpyBatch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream);
}

// cuda.h's cuMemcpy3DBatchAsync is cuMemcpy3DBatchAsync_v2 (CUDA 13, without failIdx).
CUresult cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, unsigned long long flags,
                              CUstream hStream) {
  return Memcpy3DBatch(numOps, opList, nullptr, flags, hStream);
}

CUresult cuMemcpy3DBatchAsync_v1(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                 unsigned long long flags, CUstream hStream) __asm__("cuMemcpy3DBatchAsync");
CUresult cuMemcpy3DBatchAsync_v1(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                 unsigned long long flags, CUstream hStream) {
  return Memcpy3DBatch(numOps, opList, failIdx, flags, hStream);
}

}  // extern "C"
