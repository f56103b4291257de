// CUDA arrays: created and destroyed in the executor, described in the client (the descriptor queries are local),
// and the 1D array copies. Arrays in 2D/3D copies go through memory_2d.cc; both run as strided copies.
#include <initializer_list>

#include "frontend/api/api_support.h"
#include "frontend/api/strided_copy.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult CreateArray(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR& descriptor) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  CUarray array = client->arrays.Create(NextObjectId(), descriptor);
  auto& builder = Builder();
  const auto call = wire::CreateArrayCreate(builder, array->id, descriptor.Width, descriptor.Height,
                                            descriptor.Depth, descriptor.Format, descriptor.NumChannels,
                                            descriptor.Flags)
                        .Union();
  if (const CUresult result = client->Call(builder, wire::Call::ArrayCreate, call, {}, nullptr);
      result != CUDA_SUCCESS) {
    client->arrays.Destroy(array);
    return result;
  }
  *handle = array;
  return CUDA_SUCCESS;
}

// A 1D array copy: `bytes` bytes from `src` to `dst`, with the array sides (`arrays`) at a byte offset.
CUresult LinearArrayCopy(CopySide dst, CopySide src, size_t bytes, CUstream stream, bool async,
                         std::initializer_list<CUarray> arrays) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  for (CUarray array : arrays) {
    if (!client->arrays.Contains(array)) return CUDA_ERROR_INVALID_VALUE;
  }
  if ((dst.host && dst.host_ptr == nullptr) || (src.host && src.host_ptr == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  StridedCopy copy;
  copy.dst = dst;
  copy.src = src;
  copy.width = bytes;
  copy.height = 1;
  copy.depth = 1;
  copy.linear = true;
  return RunStridedCopy(*client, copy, stream, async);
}

CopySide ArraySide(CUarray array, size_t offset) {
  CopySide side;
  side.array = array;
  side.x = offset;
  return side;
}

CopySide HostSide(const void* host) {
  CopySide side;
  side.host = true;
  side.host_ptr = static_cast<uint8_t*>(const_cast<void*>(host));
  return side;
}

CopySide DeviceSide(CUdeviceptr device) {
  CopySide side;
  side.device_ptr = device;
  return side;
}

}  // namespace

extern "C" {

CUresult cuArrayCreate(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* descriptor) {
  if (handle == nullptr || descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR three_d{};
  three_d.Width = descriptor->Width;
  three_d.Height = descriptor->Height;
  three_d.Format = descriptor->Format;
  three_d.NumChannels = descriptor->NumChannels;
  return CreateArray(handle, three_d);
}

CUresult cuArray3DCreate(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* descriptor) {
  if (handle == nullptr || descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(handle, *descriptor);
}

CUresult cuArrayDestroy(CUarray array) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (!client->arrays.Contains(array)) return CUDA_ERROR_INVALID_HANDLE;
  auto& builder = Builder();
  const auto call = wire::CreateArrayDestroy(builder, array->id).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ArrayDestroy, call, {}, nullptr));
  client->arrays.Destroy(array);
  return CUDA_SUCCESS;
}

CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR* descriptor, CUarray array) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!client->arrays.Contains(array)) return CUDA_ERROR_INVALID_HANDLE;
  descriptor->Width = array->descriptor.Width;
  descriptor->Height = array->descriptor.Height;
  descriptor->Format = array->descriptor.Format;
  descriptor->NumChannels = array->descriptor.NumChannels;
  return CUDA_SUCCESS;
}

CUresult cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR* descriptor, CUarray array) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (descriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!client->arrays.Contains(array)) return CUDA_ERROR_INVALID_HANDLE;
  *descriptor = array->descriptor;
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoA(CUarray dst, size_t offset, const void* src, size_t bytes) {
  return LinearArrayCopy(ArraySide(dst, offset), HostSide(src), bytes, nullptr, false, {dst});
}
CUresult cuMemcpyHtoAAsync(CUarray dst, size_t offset, const void* src, size_t bytes, CUstream stream) {
  return LinearArrayCopy(ArraySide(dst, offset), HostSide(src), bytes, stream, true, {dst});
}
CUresult cuMemcpyAtoH(void* dst, CUarray src, size_t offset, size_t bytes) {
  return LinearArrayCopy(HostSide(dst), ArraySide(src, offset), bytes, nullptr, false, {src});
}
CUresult cuMemcpyAtoHAsync(void* dst, CUarray src, size_t offset, size_t bytes, CUstream stream) {
  return LinearArrayCopy(HostSide(dst), ArraySide(src, offset), bytes, stream, true, {src});
}
CUresult cuMemcpyDtoA(CUarray dst, size_t offset, CUdeviceptr src, size_t bytes) {
  return LinearArrayCopy(ArraySide(dst, offset), DeviceSide(src), bytes, nullptr, false, {dst});
}
CUresult cuMemcpyAtoD(CUdeviceptr dst, CUarray src, size_t offset, size_t bytes) {
  return LinearArrayCopy(DeviceSide(dst), ArraySide(src, offset), bytes, nullptr, false, {src});
}
CUresult cuMemcpyAtoA(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset, size_t bytes) {
  return LinearArrayCopy(ArraySide(dst, dst_offset), ArraySide(src, src_offset), bytes, nullptr, false,
                         {dst, src});
}

}  // extern "C"
