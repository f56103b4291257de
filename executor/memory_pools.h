// The stream-ordered memory state of a session (handlers_memory_pools.cc, handlers_ipc.cc): the pools the client
// created or imported, by the client's ids, what it allocated from pools and has not freed (charged to its tenant),
// and pointers it imported from other sessions' pools. Release() frees and destroys what is left when the session
// ends.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <unordered_map>
#include <unordered_set>

#include "executor/driver.h"

namespace curelay::executor {

class MemoryPools {
 public:
  explicit MemoryPools(Driver& driver) : driver_(driver) {}

  // A pool the client created (`imported` false) or imported from another session, known to it as `id`.
  void Add(uint64_t id, CUmemoryPool pool, bool imported) {
    pools_[id] = pool;
    if (imported) imported_.insert(id);
  }
  // The driver's pool of client id `id`; null when the session has none.
  CUmemoryPool Find(uint64_t id) const {
    const auto found = pools_.find(id);
    return found != pools_.end() ? found->second : nullptr;
  }
  bool Contains(uint64_t id) const { return pools_.count(id) != 0; }
  bool Imported(uint64_t id) const { return imported_.count(id) != 0; }
  void Destroyed(uint64_t id) {
    pools_.erase(id);
    imported_.erase(id);
  }

  // cuMemAllocAsync outside a capture: `bytes` charged until the application frees it.
  void Allocated(CUdeviceptr ptr, uint64_t bytes) { allocations_[ptr] = bytes; }
  // The application freed `ptr`: the bytes to refund (0 when it was not one of Allocated's).
  uint64_t Freed(CUdeviceptr ptr);
  // cuMemPoolImportPointer: another session's memory, freed at the end if the application did not free it.
  void PointerImported(CUdeviceptr ptr) { imported_pointers_.insert(ptr); }
  void ImportedPointerFreed(CUdeviceptr ptr) { imported_pointers_.erase(ptr); }
  // Whether `address` lies in an allocation the session made from a pool and has not freed.
  bool Holds(CUdeviceptr address) const;

  // At the session's end: frees what the application left allocated or imported, then destroys its pools (a
  // device's current pool destroyed makes its default pool current again, for the next session of this process).
  void Release();

 private:
  Driver& driver_;
  std::unordered_map<uint64_t, CUmemoryPool> pools_;
  std::unordered_set<uint64_t> imported_;  // ids of pools imported from other sessions
  std::unordered_map<CUdeviceptr, uint64_t> allocations_;  // bytes
  std::unordered_set<CUdeviceptr> imported_pointers_;
};

}  // namespace curelay::executor
