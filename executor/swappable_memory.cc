#include "executor/swappable_memory.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace curelay::executor {
namespace {

CUmemAllocationProp DeviceMemory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

bool SwappableMemory::Supported() const {
  return driver_.cuMemAddressReserve != nullptr && driver_.cuMemAddressFree != nullptr &&
         driver_.cuMemCreate != nullptr && driver_.cuMemRelease != nullptr && driver_.cuMemMap != nullptr &&
         driver_.cuMemUnmap != nullptr && driver_.cuMemSetAccess != nullptr &&
         driver_.cuMemGetAllocationGranularity != nullptr;
}

uint64_t SwappableMemory::MovableSize(int device, uint64_t bytes) {
  if (!Supported()) return 0;
  uint64_t& granularity = granularity_[device];
  if (granularity == 0) {
    const CUmemAllocationProp prop = DeviceMemory(device);
    size_t value = 0;
    if (driver_.cuMemGetAllocationGranularity(&value, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS ||
        value == 0) {
      granularity_.erase(device);
      return 0;
    }
    granularity = value;
  }
  // Below a granule the rounding would multiply the memory taken: such allocations stay ordinary.
  if (bytes < granularity || bytes > UINT64_MAX - granularity) return 0;
  return (bytes + granularity - 1) / granularity * granularity;
}

CUresult SwappableMemory::MapPhysical(CUdeviceptr ptr, Allocation& allocation) {
  const CUmemAllocationProp prop = DeviceMemory(allocation.device);
  CUmemGenericAllocationHandle handle = 0;
  CUresult result = driver_.cuMemCreate(&handle, allocation.size, &prop, 0);
  if (result != CUDA_SUCCESS) return result;
  result = driver_.cuMemMap(ptr, allocation.size, 0, handle, 0);
  if (result == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    result = driver_.cuMemSetAccess(ptr, allocation.size, &access, 1);
    if (result != CUDA_SUCCESS) driver_.cuMemUnmap(ptr, allocation.size);
  }
  if (result != CUDA_SUCCESS) {
    driver_.cuMemRelease(handle);
    return result;
  }
  allocation.handle = handle;
  return CUDA_SUCCESS;
}

void SwappableMemory::UnmapPhysical(CUdeviceptr ptr, Allocation& allocation) {
  if (allocation.handle == 0) return;
  driver_.cuMemUnmap(ptr, allocation.size);
  driver_.cuMemRelease(allocation.handle);
  allocation.handle = 0;
}

CUresult SwappableMemory::Allocate(CUcontext context, int device, uint64_t bytes, CUdeviceptr* ptr) {
  const uint64_t size = MovableSize(device, bytes);
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr base = 0;
  CUresult result = driver_.cuMemAddressReserve(&base, size, 0, 0, 0);
  if (result != CUDA_SUCCESS) return result;
  Allocation allocation{size, device, context, 0};
  result = MapPhysical(base, allocation);
  if (result != CUDA_SUCCESS) {
    driver_.cuMemAddressFree(base, size);
    return result;
  }
  allocations_.emplace(base, allocation);
  movable_bytes_ += size;
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult SwappableMemory::Free(CUdeviceptr ptr) {
  const auto found = allocations_.find(ptr);
  if (found == allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
  // cuMemFree synchronizes with the device: work still using the memory finishes first.
  if (found->second.handle != 0 && driver_.cuCtxSynchronize != nullptr) driver_.cuCtxSynchronize();
  UnmapPhysical(ptr, found->second);
  driver_.cuMemAddressFree(ptr, found->second.size);
  movable_bytes_ -= found->second.size;
  allocations_.erase(found);
  return CUDA_SUCCESS;
}

bool SwappableMemory::Contains(CUdeviceptr ptr) const {
  auto next = allocations_.upper_bound(ptr);
  if (next == allocations_.begin()) return false;
  --next;
  return ptr - next->first < next->second.size;
}

int SwappableMemory::SoleDevice() const {
  int device = -1;
  for (const auto& [ptr, allocation] : allocations_) {
    if (device != -1 && allocation.device != device) return -1;
    device = allocation.device;
  }
  return device;
}

CUresult SwappableMemory::CopyPieces(bool to_host, CUdeviceptr device, uint8_t* store, uint64_t offset,
                                     uint64_t bytes, uint64_t piece_bytes) {
  while (bytes != 0) {
    const uint64_t room = piece_bytes - offset % piece_bytes;
    const uint64_t length = std::min(bytes, room);
    const CUresult result = to_host ? driver_.cuMemcpyDtoH(store + offset, device, length)
                                    : driver_.cuMemcpyHtoD(device, store + offset, length);
    if (result != CUDA_SUCCESS) return result;
    device += length;
    offset += length;
    bytes -= length;
  }
  return CUDA_SUCCESS;
}

CUresult SwappableMemory::SwapOut(uint8_t* store, uint64_t store_bytes, uint64_t piece_bytes) {
  if (swapped_out_) return CUDA_SUCCESS;
  if (store_bytes < movable_bytes_ || piece_bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  // Every copy first, then every release: a copy that fails leaves all memory resident, as it was.
  uint64_t offset = 0;
  for (auto& [ptr, allocation] : allocations_) {
    CUresult result = driver_.cuCtxSetCurrent(allocation.context);
    if (result == CUDA_SUCCESS) result = CopyPieces(true, ptr, store, offset, allocation.size, piece_bytes);
    if (result != CUDA_SUCCESS) return result;
    allocation.store_offset = offset;
    offset += allocation.size;
  }
  for (auto& [ptr, allocation] : allocations_) UnmapPhysical(ptr, allocation);
  swapped_out_ = true;
  return CUDA_SUCCESS;
}

CUresult SwappableMemory::SwapIn(const uint8_t* store, uint64_t piece_bytes) {
  if (!swapped_out_) return CUDA_SUCCESS;
  if (piece_bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult result = CUDA_SUCCESS;
  for (auto& [ptr, allocation] : allocations_) {
    if (allocation.handle != 0) continue;  // never left (nothing is made while swapped out; kept safe regardless)
    result = driver_.cuCtxSetCurrent(allocation.context);
    if (result == CUDA_SUCCESS) result = MapPhysical(ptr, allocation);
    if (result != CUDA_SUCCESS) break;
    allocation.swapped_back = false;
  }
  for (auto& [ptr, allocation] : allocations_) {
    if (result != CUDA_SUCCESS) break;
    if (allocation.swapped_back) continue;
    result = driver_.cuCtxSetCurrent(allocation.context);
    if (result == CUDA_SUCCESS) {
      result = CopyPieces(false, ptr, const_cast<uint8_t*>(store), allocation.store_offset, allocation.size,
                          piece_bytes);
    }
  }
  if (result != CUDA_SUCCESS) {
    // Back to swapped out: the store still holds every byte.
    for (auto& [ptr, allocation] : allocations_) {
      if (!allocation.swapped_back) UnmapPhysical(ptr, allocation);
    }
    return result;
  }
  for (auto& [ptr, allocation] : allocations_) allocation.swapped_back = true;
  swapped_out_ = false;
  return CUDA_SUCCESS;
}

void SwappableMemory::ReleaseAll() {
  for (auto& [ptr, allocation] : allocations_) {
    UnmapPhysical(ptr, allocation);
    driver_.cuMemAddressFree(ptr, allocation.size);
  }
  allocations_.clear();
  movable_bytes_ = 0;
  swapped_out_ = false;
}

}  // namespace curelay::executor
