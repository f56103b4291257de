// Page-locked host memory bookkeeping for cuMemHostRegister.
//
// Nothing is pinned for real (there is no DMA engine); registration matters
// because it changes semantics the driver documents: async copies from
// registered memory are not staged, async copies to it return before the
// copy is done, and (with unified addressing) kernels may dereference it.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_HOST_REGISTRY_H_
#define CURELAY_TESTS_EMULATED_DRIVER_HOST_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <shared_mutex>

#include "cuda_api.h"

namespace curelay::emulated {

class HostRegistry {
 public:
  // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED if any byte of the range is
  // already registered.
  CUresult Register(uint64_t base, size_t size, unsigned int flags, uint64_t owner_ctx);
  // CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED unless `base` starts a registration.
  CUresult Unregister(uint64_t base);
  void UnregisterOwnedBy(uint64_t owner_ctx);

  // True if all of [addr, addr + bytes) is inside one registered range;
  // that range is returned through base/size when non-null.
  bool Contains(uint64_t addr, size_t bytes, uint64_t* base = nullptr,
                size_t* size = nullptr) const;

  // CU_POINTER_ATTRIBUTE_SYNC_MEMOPS of the registration holding `addr` (cuPointerSetAttribute); false if no
  // registration holds it.
  bool SetSyncMemops(uint64_t addr, bool sync);
  bool SyncMemops(uint64_t addr, bool* sync) const;

 private:
  struct Range {
    size_t size;
    unsigned int flags;
    uint64_t owner_ctx;
    bool sync_memops = false;
  };
  // The registration holding addr, or ranges_.end(); mu_ held.
  std::map<uint64_t, Range>::const_iterator Holding(uint64_t addr) const;
  mutable std::shared_mutex mu_;
  std::map<uint64_t, Range> ranges_;
};

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_HOST_REGISTRY_H_
