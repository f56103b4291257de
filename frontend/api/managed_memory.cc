// Managed memory on the same host: cuMemAllocManaged hands out page-locked memory that the application and the
// executor map at the same address, registered with the executor's driver, so one pointer works on the host and in
// kernels. The GPU reads and writes it over the bus (as mapped pinned memory) instead of migrating pages:
// prefetches and advice are accepted as the hints they are and move nothing; they are kept for the range attributes
// (frontend/client/managed_range_hints.h). Over a network there is no memory both sides reach: NOT_SUPPORTED, with
// one log line.
//
// Managed globals (__managed__ variables, cuLibraryGetManaged) live in the executor's managed memory, which this
// process cannot map: their pages here, at the variables' own addresses, are a shared file that the executor keeps in
// step with the variables around every request and answer (executor/managed_global_mirrors.h).
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/api/host_memory.h"
#include "frontend/client/log.h"
#include "frontend/client/per_thread_stream.h"
#include "transport/shm/shared_file.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// The pages this process shares with the executor for managed globals (the driver packs variables of different
// modules and libraries into one page, so a page goes only when no shared variable lies on it), and the variables.
struct SharedManagedPages {
  Client* client;
  uint64_t address;
  uint64_t bytes;
  bool ready;  // false while the executor is being asked
};

struct SharedManagedGlobal {
  Client* client;
  uint64_t address;
  uint64_t bytes;
  uint64_t module_id;
  uint64_t library_id;
  uint64_t context;  // the client's id of the context the executor copies in (0: a library's, no context)
};

struct ManagedGlobalPages {
  std::mutex mutex;
  std::vector<SharedManagedPages> pages;
  std::vector<SharedManagedGlobal> globals;
  std::atomic<size_t> count{0};  // pages.size(), read without the lock on every copy
};

ManagedGlobalPages* shared_pages = nullptr;

// A forked child has no session of its parent's (and, with MADV_DONTFORK, none of these pages): a fresh registry, the
// old one left as it is (its lock may have been held by a thread that does not exist in the child).
void ForgetParentManagedGlobals() { shared_pages = new ManagedGlobalPages; }

ManagedGlobalPages& SharedPages() {
  static const bool installed = [] {
    shared_pages = new ManagedGlobalPages;  // never destroyed: the application may exit from any thread
    pthread_atfork(nullptr, nullptr, ForgetParentManagedGlobals);
    return true;
  }();
  (void)installed;
  return *shared_pages;
}

// Whether [address, +bytes) lies in one shared managed global (the range prefetches and advice may name; a
// variable may span two shared files, so the variables are asked, not the pages).
bool InSharedGlobal(Client& client, uint64_t address, uint64_t bytes) {
  ManagedGlobalPages& shared = SharedPages();
  std::lock_guard<std::mutex> lock(shared.mutex);
  return std::any_of(shared.globals.begin(), shared.globals.end(), [&](const SharedManagedGlobal& global) {
    return global.client == &client && address >= global.address && address - global.address < global.bytes &&
           bytes <= global.bytes - (address - global.address);
  });
}

// A range of managed memory of this client, as the hints that name one require.
CUresult RequireManagedRange(Client& client, CUdeviceptr ptr, size_t bytes) {
  const char* base = nullptr;
  size_t allocation_bytes = 0;
  if (bytes != 0 && InSharedGlobal(client, ptr, bytes)) return CUDA_SUCCESS;  // a managed global
  if (bytes == 0 || !client.host_allocations.Managed(reinterpret_cast<const void*>(ptr), &base, &allocation_bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t offset = static_cast<size_t>(reinterpret_cast<const char*>(ptr) - base);
  return bytes <= allocation_bytes - offset ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// The hints kept for a managed range ([ptr, ptr + bytes) checked as RequireManagedRange does) and the range's offset
// in its allocation. A managed global's hints are not kept: *hints stays null and its attributes answer the defaults.
CUresult ManagedRangeHintsOf(Client& client, CUdeviceptr ptr, size_t bytes, std::shared_ptr<ManagedRangeHints>* hints,
                             size_t* offset) {
  *hints = nullptr;
  *offset = 0;
  if (bytes != 0 && InSharedGlobal(client, ptr, bytes)) return CUDA_SUCCESS;  // a managed global
  // One look-up: the allocation the range is checked against is the one whose hints are used.
  const char* base = nullptr;
  size_t allocation_bytes = 0;
  std::shared_ptr<ManagedRangeHints> found =
      client.host_allocations.Hints(reinterpret_cast<const void*>(ptr), &base, &allocation_bytes);
  if (bytes == 0 || found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t at = static_cast<size_t>(reinterpret_cast<const char*>(ptr) - base);
  if (bytes > allocation_bytes - at) return CUDA_ERROR_INVALID_VALUE;
  *hints = std::move(found);
  *offset = at;
  return CUDA_SUCCESS;
}

// A location a hint may name: a device of this session, or the host.
CUresult RequireHintLocation(Client& client, const CUmemLocation& location) {
  switch (location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return RequireDevice(client, location.id);
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: {
      // A node of this host (managed memory exists on the same host only, so it is the GPU's host too).
      if (location.id < 0) return CUDA_ERROR_INVALID_VALUE;
      char node[64];
      std::snprintf(node, sizeof(node), "/sys/devices/system/node/node%d", location.id);
      return access(node, F_OK) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// The checks the batched prefetches and discards share: same host, no flags, a stream other than the legacy one
// (cuda.h: "Must not be legacy NULL stream"), and every range managed memory of this client.
CUresult RequireBatch(Client** client, CUdeviceptr* ptrs, size_t* sizes, size_t count, unsigned long long flags,
                      CUstream stream) {
  CURELAY_RETURN_IF_ERROR(RequireContext(client));
  // Batched operations need CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, which a remote session reports as 0.
  if ((*client)->remote()) return CUDA_ERROR_NOT_SUPPORTED;
  if (flags != 0 || count == 0 || ptrs == nullptr || sizes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((stream == nullptr && !NullStreamIsPerThread()) || stream == CU_STREAM_LEGACY) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(**client, stream, &wire_stream));
  for (size_t i = 0; i < count; ++i) CURELAY_RETURN_IF_ERROR(RequireManagedRange(**client, ptrs[i], sizes[i]));
  return CUDA_SUCCESS;
}

// Records batched prefetches: prefetch_locations[k] applies to ranges location_starts[k] up to the next start.
CUresult PrefetchBatch(Client& client, CUdeviceptr* ptrs, size_t* sizes, size_t count,
                       CUmemLocation* prefetch_locations, size_t* location_starts, size_t location_count) {
  if (prefetch_locations == nullptr || location_starts == nullptr || location_count == 0 || location_count > count ||
      location_starts[0] != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t k = 0; k < location_count; ++k) {
    if ((k > 0 && location_starts[k] <= location_starts[k - 1]) || location_starts[k] >= count) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    CURELAY_RETURN_IF_ERROR(RequireHintLocation(client, prefetch_locations[k]));
  }
  for (size_t k = 0; k < location_count; ++k) {
    const size_t end = k + 1 < location_count ? location_starts[k + 1] : count;
    for (size_t i = location_starts[k]; i < end; ++i) {
      std::shared_ptr<ManagedRangeHints> hints;
      size_t offset = 0;
      CURELAY_RETURN_IF_ERROR(ManagedRangeHintsOf(client, ptrs[i], sizes[i], &hints, &offset));
      if (hints != nullptr) hints->Prefetched(offset, sizes[i], prefetch_locations[k]);
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

namespace curelay::frontend {

CUresult ShareManagedGlobal(Client& client, uint64_t module_id, uint64_t library_id, uint64_t context,
                            CUdeviceptr address, size_t bytes) {
  if (client.remote()) return CUDA_ERROR_NOT_SUPPORTED;  // the executor refuses them (and says so in its log)
  if (bytes == 0 || address > UINT64_MAX - bytes - 4096) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t first = address / page * page;
  const uint64_t end = (address + bytes + page - 1) / page * page;
  ManagedGlobalPages& shared = SharedPages();
  uint64_t run_start = first, run_end = end;
  std::string path, error;
  {
    std::lock_guard<std::mutex> lock(shared.mutex);
    // Pages shared already: only the first and the last can be (those of the variables next to this one).
    const auto covered = [&](uint64_t at) {
      return std::any_of(shared.pages.begin(), shared.pages.end(), [&](const SharedManagedPages& pages) {
        return pages.client == &client && at >= pages.address && at - pages.address < pages.bytes;
      });
    };
    while (run_start < run_end && covered(run_start)) run_start += page;
    while (run_end > run_start && covered(run_end - page)) run_end -= page;
    if (run_start < run_end) {
      void* local = transport::CreateSharedFile(client.same_host_directory(), "managed", run_end - run_start, &path,
                                                &error);
      if (local == nullptr) {
        Log().warn("managed global: cannot create shared pages: {}", error);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      // The variable's own address, so that the pointer the application gets works here and in kernels alike.
      if (!transport::MoveMapping(local, run_end - run_start, reinterpret_cast<void*>(run_start))) {
        munmap(local, run_end - run_start);
        unlink(path.c_str());
        Log().warn("managed global at {:#x}: that address is taken in this process; answering "
                   "CUDA_ERROR_NOT_SUPPORTED", address);
        return CUDA_ERROR_NOT_SUPPORTED;
      }
      // Not inherited by a forked child: its writes would reach this session's variables.
      madvise(reinterpret_cast<void*>(run_start), run_end - run_start, MADV_DONTFORK);
      // Held for this call while the executor is asked (without the lock: a fork meanwhile must not inherit it).
      shared.pages.push_back({&client, run_start, run_end - run_start, false});
      shared.count = shared.pages.size();
    }
  }
  auto& builder = Builder();
  const auto call = wire::CreateManagedGlobalShare(builder, module_id, library_id, address, bytes,
                                                   path.empty() ? 0 : builder.CreateString(path), run_start,
                                                   run_end - run_start, context)
                        .Union();
  const CUresult result = client.Call(builder, wire::Call::ManagedGlobalShare, call, {}, nullptr);
  if (!path.empty()) unlink(path.c_str());  // normally the executor already did
  std::lock_guard<std::mutex> lock(shared.mutex);
  if (result == CUDA_SUCCESS &&
      std::none_of(shared.globals.begin(), shared.globals.end(), [&](const SharedManagedGlobal& global) {
        return global.client == &client && global.address == address && global.module_id == module_id &&
               global.library_id == library_id;
      })) {
    shared.globals.push_back({&client, address, bytes, module_id, library_id, context});
  }
  if (run_start < run_end) {
    std::erase_if(shared.pages, [&](SharedManagedPages& pages) {
      if (pages.client != &client || pages.address != run_start || pages.ready) return false;
      if (result == CUDA_SUCCESS) {
        pages.ready = true;
        return false;
      }
      munmap(reinterpret_cast<void*>(pages.address), pages.bytes);
      return true;
    });
    shared.count = shared.pages.size();
  }
  return result;
}

void ForgetManagedGlobals(Client& client, uint64_t module_id, uint64_t library_id, uint64_t context) {
  ManagedGlobalPages& shared = SharedPages();
  std::lock_guard<std::mutex> lock(shared.mutex);
  std::erase_if(shared.globals, [&](const SharedManagedGlobal& global) {
    if (global.client != &client) return false;
    return module_id != 0    ? global.module_id == module_id
           : library_id != 0 ? global.library_id == library_id
                             : global.context == context && global.module_id != 0;
  });
  // The executor drops the same pages: those no variable it keeps in step lies on.
  std::erase_if(shared.pages, [&](const SharedManagedPages& pages) {
    if (pages.client != &client || !pages.ready) return false;
    const bool used = std::any_of(shared.globals.begin(), shared.globals.end(), [&](const SharedManagedGlobal& global) {
      return global.client == &client && global.address < pages.address + pages.bytes &&
             pages.address < global.address + global.bytes;
    });
    if (used) return false;
    munmap(reinterpret_cast<void*>(pages.address), pages.bytes);
    return true;
  });
  shared.count = shared.pages.size();
}

CUresult NoteRefusedManagedGlobal(Client& client, const char* name, CUresult result) {
  static std::atomic<bool> said{false};
  if (result == CUDA_ERROR_NOT_SUPPORTED && client.remote() && !said.exchange(true)) {
    Log().warn("managed global '{}': managed memory needs the backend on this host (no memory is shared over the "
               "network); answering CUDA_ERROR_NOT_SUPPORTED", name);
  }
  return result;
}

bool TouchesManagedGlobals(Client& client, CUdeviceptr address, size_t bytes) {
  ManagedGlobalPages& shared = SharedPages();
  if (shared.count.load(std::memory_order_relaxed) == 0 || bytes == 0) return false;
  const uint64_t end = address + std::min<uint64_t>(bytes, UINT64_MAX - address);
  std::lock_guard<std::mutex> lock(shared.mutex);
  return std::any_of(shared.pages.begin(), shared.pages.end(), [&](const SharedManagedPages& pages) {
    return pages.client == &client && address < pages.address + pages.bytes && pages.address < end;
  });
}

}  // namespace curelay::frontend

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
// refused as natively. What was asked is kept for cuMemRangeGetAttribute (ManagedRangeHints).
CUresult cuMemPrefetchAsync(CUdeviceptr ptr, size_t bytes, CUmemLocation location, unsigned int flags,
                            CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  std::shared_ptr<ManagedRangeHints> hints;
  size_t offset = 0;
  CURELAY_RETURN_IF_ERROR(ManagedRangeHintsOf(*client, ptr, bytes, &hints, &offset));
  CURELAY_RETURN_IF_ERROR(RequireHintLocation(*client, location));
  if (hints != nullptr) hints->Prefetched(offset, bytes, location);
  return CUDA_SUCCESS;
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

CUresult cuMemAdvise(CUdeviceptr ptr, size_t bytes, CUmem_advise advice, CUmemLocation location) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<ManagedRangeHints> hints;
  size_t offset = 0;
  CURELAY_RETURN_IF_ERROR(ManagedRangeHintsOf(*client, ptr, bytes, &hints, &offset));
  // Only the location-taking advice reads the location; accessed-by takes a device or the host only (cuda.h).
  if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION || advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
      advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    CURELAY_RETURN_IF_ERROR(RequireHintLocation(*client, location));
  }
  if ((advice == CU_MEM_ADVISE_SET_ACCESSED_BY || advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY) &&
      location.type != CU_MEM_LOCATION_TYPE_DEVICE && location.type != CU_MEM_LOCATION_TYPE_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return hints != nullptr ? hints->Advise(offset, bytes, advice, location) : CUDA_SUCCESS;
}

// The exported cuMemAdvise is the older form, naming the device by its ordinal.
CUresult cuMemAdvise_v1(CUdeviceptr ptr, size_t bytes, CUmem_advise advice, CUdevice device) __asm__("cuMemAdvise");
CUresult cuMemAdvise_v1(CUdeviceptr ptr, size_t bytes, CUmem_advise advice, CUdevice device) {
  CUmemLocation location{};
  location.type = device == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device;
  return cuMemAdvise(ptr, bytes, advice, location);
}

// Range attributes: the hints the application gave (ManagedRangeHints), as the driver reports them.
CUresult cuMemRangeGetAttribute(void* data, size_t data_size, CUmem_range_attribute attribute, CUdeviceptr ptr,
                                size_t bytes) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));  // as the driver, which answers for the current context
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<ManagedRangeHints> hints;
  size_t offset = 0;
  CURELAY_RETURN_IF_ERROR(ManagedRangeHintsOf(*client, ptr, bytes, &hints, &offset));
  if (hints == nullptr) return ManagedRangeHints(bytes).Query(0, bytes, attribute, data, data_size);  // a global
  return hints->Query(offset, bytes, attribute, data, data_size);
}

CUresult cuMemRangeGetAttributes(void** data, size_t* data_sizes, CUmem_range_attribute* attributes, size_t count,
                                 CUdeviceptr ptr, size_t bytes) {
  if (data == nullptr || data_sizes == nullptr || attributes == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    CURELAY_RETURN_IF_ERROR(cuMemRangeGetAttribute(data[i], data_sizes[i], attributes[i], ptr, bytes));
  }
  return CUDA_SUCCESS;
}

// The batched forms: the same hints, checked as the driver checks a batch.
CUresult cuMemPrefetchBatchAsync(CUdeviceptr* ptrs, size_t* sizes, size_t count, CUmemLocation* prefetch_locations,
                                 size_t* location_starts, size_t location_count, unsigned long long flags,
                                 CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireBatch(&client, ptrs, sizes, count, flags, stream));
  return PrefetchBatch(*client, ptrs, sizes, count, prefetch_locations, location_starts, location_count);
}

// Discarded contents become indeterminate: the bytes stay as they are, which is one of the values they may read.
CUresult cuMemDiscardBatchAsync(CUdeviceptr* ptrs, size_t* sizes, size_t count, unsigned long long flags,
                                CUstream stream) {
  Client* client;
  return RequireBatch(&client, ptrs, sizes, count, flags, stream);
}

CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr* ptrs, size_t* sizes, size_t count,
                                           CUmemLocation* prefetch_locations, size_t* location_starts,
                                           size_t location_count, unsigned long long flags, CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireBatch(&client, ptrs, sizes, count, flags, stream));
  return PrefetchBatch(*client, ptrs, sizes, count, prefetch_locations, location_starts, location_count);
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
