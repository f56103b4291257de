// Stream-ordered allocation from each device's default pool and from pools the application creates: an allocation
// is made at once (emulated memory is never busy), and a free is queued on the stream, so the block stays valid for
// the work ordered before it. A pool's settable attributes are remembered; its memory statistics read as zero
// (nothing is kept in reserve). Each device has a current pool (cuDeviceSetMemPool), the default one at first.
// Access from other devices is recorded (cuMemPoolSetAccess): every emulated device reaches every other one.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <set>

#include "api_common.h"
#include "graph.h"

namespace emu = curelay::emulated;

struct CUmemPoolHandle_st {
  int device = 0;
  CUmemAllocationHandleType handle_types = CU_MEM_HANDLE_TYPE_NONE;  // what cuMemPoolExportToShareableHandle may make
  int reuse[3] = {1, 1, 1};  // the three REUSE_* attributes, all enabled by default as on the real driver
  cuuint64_t release_threshold = 0;
  // Access of each other device (cuMemPoolSetAccess); the pool's own device always has read-write access.
  CUmemAccess_flags peer_access[64] = {};
};

namespace curelay::emulated {
namespace {

constexpr int kMaxPools = 64;

std::mutex pools_mu;
std::set<CUmemoryPool> created_pools;      // guarded by pools_mu
CUmemoryPool current_pools[kMaxPools] = {};  // null: the default pool; guarded by pools_mu

CUmemPoolHandle_st* DefaultPools() {
  static auto* pools = [] {
    auto* made = new CUmemPoolHandle_st[kMaxPools];
    for (int device = 0; device < kMaxPools; ++device) made[device].device = device;
    return made;
  }();
  return pools;
}

// A device that exists and has a pool slot.
bool PoolDevice(CUdevice device) {
  return device >= 0 && device < Driver::Get().device_count() && device < kMaxPools;
}

bool KnownPool(CUmemoryPool pool) {
  if (pool >= DefaultPools() && pool < DefaultPools() + kMaxPools) return pool->device < Driver::Get().device_count();
  std::lock_guard lock(pools_mu);
  return created_pools.count(pool) != 0;
}

CUresult AllocateFromStream(CUdeviceptr* dptr, size_t bytesize, CUstream stream_handle) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(stream_handle, &ctx, &stream); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (StreamCaptures(stream.get())) return CaptureGraphAllocation(ctx, stream.get(), bytesize, dptr);
  std::shared_ptr<Allocation> allocation;
  if (CUresult r = Driver::Get().memory().Allocate(ctx->device, bytesize, ctx->handle, &allocation);
      r != CUDA_SUCCESS) {
    return r;
  }
  *dptr = allocation->base();
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::PoolDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
    *pool = &emu::DefaultPools()[device];
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (!emu::KnownPool(pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lock(emu::pools_mu);
    switch (attribute) {
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attribute - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *static_cast<int*>(value) != 0;
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->release_threshold = *static_cast<cuuint64_t*>(value);
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        // Only a reset (to 0) is allowed.
        return *static_cast<cuuint64_t*>(value) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  });
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (!emu::KnownPool(pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lock(emu::pools_mu);
    switch (attribute) {
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *static_cast<int*>(value) = pool->reuse[attribute - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *static_cast<cuuint64_t*>(value) = pool->release_threshold;
        return CUDA_SUCCESS;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *static_cast<cuuint64_t*>(value) = 0;
        return CUDA_SUCCESS;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  });
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep) {
  return emu::Guard([&] {
    (void)min_bytes_to_keep;  // nothing is kept in reserve
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    return emu::KnownPool(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream_handle) {
  return emu::Guard([&] { return emu::AllocateFromStream(dptr, bytesize, stream_handle); });
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream stream_handle) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (!emu::KnownPool(pool)) return CUDA_ERROR_INVALID_VALUE;
    return emu::AllocateFromStream(dptr, bytesize, stream_handle);
  });
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pool == nullptr || props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
        props->location.id >= emu::Driver::Get().device_count()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    // A fixture rule, so a test sees the field arrive: usage bits cuda.h does not define are refused (the H200's
    // driver takes any, measured with 0x8000, and takes the decompress bit without a decompression engine).
    if ((props->usage & ~CU_MEM_POOL_CREATE_USAGE_HW_DECOMPRESS) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
        props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    auto* made = new CUmemPoolHandle_st;
    made->device = props->location.id;
    made->handle_types = props->handleTypes;
    std::lock_guard lock(emu::pools_mu);
    emu::created_pools.insert(made);
    *pool = made;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::lock_guard lock(emu::pools_mu);
    if (emu::created_pools.erase(pool) == 0) return CUDA_ERROR_INVALID_VALUE;
    // As the driver: a device whose current pool is destroyed goes back to its default pool.
    for (auto& current : emu::current_pools) {
      if (current == pool) current = nullptr;
    }
    delete pool;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice device, CUmemoryPool pool) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (!emu::PoolDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
    if (!emu::KnownPool(pool) || pool->device != device) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lock(emu::pools_mu);
    emu::current_pools[device] = pool == &emu::DefaultPools()[device] ? nullptr : pool;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice device) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::PoolDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard lock(emu::pools_mu);
    *pool = emu::current_pools[device] != nullptr ? emu::current_pools[device] : &emu::DefaultPools()[device];
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream stream_handle) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    std::shared_ptr<emu::Stream> stream;
    if (CUresult r = emu::ResolveStream(stream_handle, &ctx, &stream); r != CUDA_SUCCESS) return r;
    // Captured, a free node of a graph's allocation; outside captures a graph's allocation is freed as any.
    if (emu::StreamCaptures(stream.get())) return emu::CaptureGraphFree(ctx, stream.get(), dptr);
    bool graph_allocation = false;
    if (CUresult r = emu::FreeGraphAllocation(dptr, ctx, stream.get(), /*async=*/true, &graph_allocation);
        graph_allocation) {
      return r;
    }
    auto allocation = emu::Driver::Get().memory().Find(dptr, 0);
    if (dptr == 0 || allocation == nullptr || allocation->base() != dptr) return CUDA_ERROR_INVALID_VALUE;
    emu::SubmitOp(ctx, stream.get(), [dptr] {
      emu::Driver::Get().memory().Release(dptr);
      return CUDA_SUCCESS;
    });
    return CUDA_SUCCESS;
  });
}

// As the driver: only device locations; the pool's own device keeps read-write access (revoking it is
// CUDA_ERROR_INVALID_VALUE); read-only access is not offered for pools.
CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (!emu::KnownPool(pool) || (count != 0 && map == nullptr)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; ++i) {
      const CUmemAccessDesc& descriptor = map[i];
      if (descriptor.location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
      if (!emu::PoolDevice(descriptor.location.id)) return CUDA_ERROR_INVALID_DEVICE;
      if (descriptor.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && descriptor.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      if (descriptor.location.id == pool->device && descriptor.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    std::lock_guard lock(emu::pools_mu);
    for (size_t i = 0; i < count; ++i) pool->peer_access[map[i].location.id] = map[i].flags;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool memPool, CUmemLocation* location) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (flags == nullptr || location == nullptr || !emu::KnownPool(memPool)) return CUDA_ERROR_INVALID_VALUE;
    if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!emu::PoolDevice(location->id)) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard lock(emu::pools_mu);
    *flags = location->id == memPool->device ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : memPool->peer_access[location->id];
    return CUDA_SUCCESS;
  });
}

// Pools shared between processes: an exported pool is a memfd naming its device (the pool's memory is in its blocks,
// each memfd-backed when large enough); a pointer exported from it is a CUDA IPC handle of the block
// (api_ipc.cc), which the importing process opens. Simplifications of this fixture: pool attributes and access are
// not carried over, any exportable block exports as a pool pointer, and an imported pointer is freed only by
// cuMemFreeAsync.
namespace {
constexpr uint32_t kPoolMagic = 0x4c4f4f50;  // "POOL"
struct ExportedPool {
  uint32_t magic;
  int32_t device;
};
static_assert(sizeof(CUmemPoolPtrExportData) >= sizeof(CUipcMemHandle));
}  // namespace

CUresult CUDAAPI cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool, CUmemAllocationHandleType type,
                                                  unsigned long long flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (handle_out == nullptr || flags != 0 || !emu::KnownPool(pool)) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    if (pool->handle_types != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    const ExportedPool contents{kPoolMagic, pool->device};
    const int fd = memfd_create("curelay-emulated-pool", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    if (pwrite(fd, &contents, sizeof(contents), 0) != static_cast<ssize_t>(sizeof(contents))) {
      close(fd);
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    *static_cast<int*>(handle_out) = fd;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool* pool_out, void* handle, CUmemAllocationHandleType type,
                                                    unsigned long long flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pool_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    ExportedPool contents{};
    const int fd = static_cast<int>(reinterpret_cast<intptr_t>(handle));
    if (pread(fd, &contents, sizeof(contents), 0) != static_cast<ssize_t>(sizeof(contents)) ||
        contents.magic != kPoolMagic || !emu::PoolDevice(contents.device)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto* made = new CUmemPoolHandle_st;
    made->device = contents.device;
    made->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    std::lock_guard lock(emu::pools_mu);
    emu::created_pools.insert(made);
    *pool_out = made;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData* data, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUipcMemHandle handle{};
  const CUresult result = cuIpcGetMemHandle(&handle, ptr);
  if (result == CUDA_SUCCESS) {
    std::memset(data->reserved, 0, sizeof(data->reserved));
    std::memcpy(data->reserved, handle.reserved, sizeof(handle.reserved));
  }
  return result;
}

CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr* ptr, CUmemoryPool pool, CUmemPoolPtrExportData* data) {
  // Only a shareable pool can hold another process's allocation (a default pool never is).
  if (data == nullptr || !emu::KnownPool(pool) || pool->handle_types != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUipcMemHandle handle{};
  std::memcpy(handle.reserved, data->reserved, sizeof(handle.reserved));
  return cuIpcOpenMemHandle(ptr, handle, 0);
}

}  // extern "C"
