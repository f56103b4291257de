// The virtual memory state of a session (handlers_virtual_memory.cc, handlers_multicast.cc): physical allocations and
// multicast objects by the client's ids, what the session mapped where, its address reservations, what is bound to
// its multicast objects, and what stays charged to the tenant while the driver still holds memory the client
// released. The client names physical allocations by ids it assigns; addresses are the driver's own. Release() gives
// back everything the session still holds when it ends.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "executor/driver.h"
#include "executor/session_memory_quota.h"

namespace curelay::executor {

class VirtualMemory {
 public:
  // A physical allocation (cuMemCreate, an import) or a multicast object: the driver's handle, how many releases it
  // still needs (cuMemRetainAllocationHandle adds one) and what it is charged (multicast objects: nothing).
  struct Physical {
    CUmemGenericAllocationHandle handle = 0;
    int references = 0;
    uint64_t bytes = 0;
  };
  // Memory bound to a multicast object: unbinding names the device the memory lives on. `memory` is the driver's
  // handle of the bound allocation.
  struct MulticastBinding {
    int device = 0;
    uint64_t offset = 0;
    uint64_t bytes = 0;
    CUmemGenericAllocationHandle memory = 0;
  };
  // Whether the sparse array (`mipmapped` false) or mipmapped array of a client id still exists.
  using ResourceExists = std::function<bool(bool mipmapped, uint64_t id)>;

  VirtualMemory(Driver& driver, SessionMemoryQuota& quota) : driver_(driver), quota_(quota) {}

  // Physical allocations and multicast objects by client id; null when the session has none of that id.
  Physical* Find(uint64_t id);
  bool Contains(uint64_t id) const { return physicals_.count(id) != 0; }
  // New memory or a new multicast object the driver answered as `handle`, known to the client as `id` (unused: the
  // caller checked), charged `bytes` (already charged by the caller).
  void Add(uint64_t id, CUmemGenericAllocationHandle handle, uint64_t bytes);
  // cuMemRetainAllocationHandle answered `handle`: the id the client knows it by, one more release needed. Memory
  // the client released while it stayed mapped gets `proposed_id` again, with its charge. 0 when `handle` is not
  // known and `proposed_id` cannot name it (0 or in use): the caller gives the driver's reference back.
  uint64_t Retained(CUmemGenericAllocationHandle handle, uint64_t proposed_id);
  // The driver released `id`'s handle once; true when that was its last reference: the id is gone, and the memory
  // stays charged while something still maps or binds it.
  bool Released(uint64_t id);

  void Mapped(CUdeviceptr ptr, uint64_t bytes, CUmemGenericAllocationHandle handle);
  // One unmap may cover several mappings that lie side by side.
  void Unmapped(CUdeviceptr ptr, uint64_t bytes);
  // The driver's handle of the memory a mapping of the session holds at `address`; 0 when none does.
  CUmemGenericAllocationHandle MappedAt(CUdeviceptr address) const;

  void Reserved(CUdeviceptr ptr, uint64_t bytes) { reservations_[ptr] = bytes; }
  void ReservationFreed(CUdeviceptr ptr) { reservations_.erase(ptr); }

  // cuMemMapArrayAsync backed a sparse array (or a mipmapped array) with `handle`'s memory. Kept until the resource
  // is destroyed: unmapping single tiles does not count, so a released allocation stays charged until its array goes
  // (never too short).
  void BackedSparse(CUmemGenericAllocationHandle handle, bool mipmapped, uint64_t resource) {
    sparse_backings_[handle].insert({mipmapped, resource});
  }

  // The driver keeps memory bound to a multicast object until it is unbound, so it stays charged until then, or
  // until the session ends. Memory bound by an address that no mapping of the session holds (a pool's) is not
  // recorded: it is charged as its pool's.
  void Bound(uint64_t multicast, const MulticastBinding& binding);
  // The bindings of `device` inside [offset, offset + bytes) of `multicast` are gone.
  void Unbound(uint64_t multicast, int device, uint64_t offset, uint64_t bytes);

  // Refunds the memory of released allocations that nothing maps, binds or backs any more.
  void Settle(const ResourceExists& resource_exists);
  // The driver gave `handle` out again for new memory: it does so only once the memory it named is gone, so that
  // memory (kept charged until its sparse array was destroyed, which can be later than the driver freed it) is no
  // longer this session's.
  void TakeBackReusedHandle(CUmemGenericAllocationHandle handle);

  // At the session's end: unbinds, unmaps, releases and frees everything still held, in that order (a physical
  // allocation is only freed once nothing binds or maps it, a reservation once nothing is mapped in it). The
  // session's account goes with it, so nothing is refunded.
  void Release();

 private:
  bool StillHeld(CUmemGenericAllocationHandle handle) const;

  Driver& driver_;
  SessionMemoryQuota& quota_;
  std::unordered_map<uint64_t, Physical> physicals_;  // by client id
  struct Mapping {
    uint64_t bytes = 0;
    CUmemGenericAllocationHandle handle = 0;  // the driver's handle of the memory mapped there
  };
  std::map<CUdeviceptr, Mapping> mappings_;  // by address (ordered: range lookups)
  std::unordered_map<CUmemGenericAllocationHandle, size_t> mappings_per_handle_;
  std::map<CUdeviceptr, uint64_t> reservations_;
  // Physical memory the client released while it was still mapped: the driver frees it only at its last unmap
  // (cuda.h), so its charge stays until then. The driver's handle -> bytes charged.
  std::unordered_map<CUmemGenericAllocationHandle, uint64_t> released_while_mapped_;
  // The driver's handle -> the resources it backs, as (mipmapped, client id).
  std::unordered_map<CUmemGenericAllocationHandle, std::set<std::pair<bool, uint64_t>>> sparse_backings_;
  std::unordered_map<uint64_t, std::vector<MulticastBinding>> multicast_bindings_;  // by the object's client id
  std::unordered_map<CUmemGenericAllocationHandle, size_t> bindings_per_handle_;
};

}  // namespace curelay::executor
