// Managed memory on the same host: cuMemAllocManaged hands out page-locked memory that the application and the
// executor map at the same address, registered with the executor's driver, so one pointer works on the host and in
// kernels. The GPU reads and writes it over the bus (as mapped pinned memory) instead of migrating pages:
// prefetches and advice are accepted as the hints they are and change nothing. Over a network there is no memory
// both sides reach: NOT_SUPPORTED, with one log line. Managed globals (__managed__, cuLibraryGetManaged) are not
// supported (docs/api-coverage.md).
#include "frontend/api/api_support.h"
#include "frontend/api/host_memory.h"
#include "frontend/client/log.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// A range of managed memory of this client, as the hints that name one require.
CUresult RequireManagedRange(Client& client, CUdeviceptr ptr, size_t bytes) {
  const char* base = nullptr;
  size_t allocation_bytes = 0;
  if (bytes == 0 || !client.host_allocations.Managed(reinterpret_cast<const void*>(ptr), &base, &allocation_bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t offset = static_cast<size_t>(reinterpret_cast<const char*>(ptr) - base);
  return bytes <= allocation_bytes - offset ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

extern "C" {

CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t bytes, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  if (client->remote()) {
    Log().warn("cuMemAllocManaged: managed memory needs the backend on this host (no memory is shared over the "
               "network); answering CUDA_ERROR_NOT_SUPPORTED");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  void* memory = nullptr;
  CURELAY_RETURN_IF_ERROR(
      AllocateSharedHostMemory(*client, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE, true, &memory));
  *ptr = reinterpret_cast<CUdeviceptr>(memory);
  return CUDA_SUCCESS;
}

// Hints: the memory stays where it is (host pages the GPU reaches directly); a range that is not managed memory is
// refused as natively.
CUresult cuMemPrefetchAsync(CUdeviceptr ptr, size_t bytes, CUmemLocation /*location*/, unsigned int flags,
                            CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  return RequireManagedRange(*client, ptr, bytes);
}

// The exported cuMemPrefetchAsync is the older form, naming the device by its ordinal.
CUresult cuMemPrefetchAsync_v1(CUdeviceptr ptr, size_t bytes, CUdevice device, CUstream stream)
    __asm__("cuMemPrefetchAsync");
CUresult cuMemPrefetchAsync_v1(CUdeviceptr ptr, size_t bytes, CUdevice device, CUstream stream) {
  CUmemLocation location{};
  location.type = device == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device;
  return cuMemPrefetchAsync(ptr, bytes, location, 0, stream);
}

CUresult cuMemAdvise(CUdeviceptr ptr, size_t bytes, CUmem_advise advice, CUmemLocation /*location*/) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return RequireManagedRange(*client, ptr, bytes);
}

// The exported cuMemAdvise is the older form, naming the device by its ordinal.
CUresult cuMemAdvise_v1(CUdeviceptr ptr, size_t bytes, CUmem_advise advice, CUdevice device) __asm__("cuMemAdvise");
CUresult cuMemAdvise_v1(CUdeviceptr ptr, size_t bytes, CUmem_advise advice, CUdevice device) {
  CUmemLocation location{};
  location.type = device == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device;
  return cuMemAdvise(ptr, bytes, advice, location);
}

CUresult cuStreamAttachMemAsync(CUstream stream, CUdeviceptr ptr, size_t bytes, unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Length 0 means the whole allocation.
  if (bytes == 0) {
    return client->host_allocations.Managed(reinterpret_cast<const void*>(ptr)) ? CUDA_SUCCESS
                                                                                : CUDA_ERROR_INVALID_VALUE;
  }
  return RequireManagedRange(*client, ptr, bytes);
}

}  // extern "C"
