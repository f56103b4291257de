// A swapping session's movable device memory (docs/scheduling.md, "Memory oversubscription"). cuMemAlloc of a
// granule (2 MiB) or more is served with the virtual memory API: an address range reserved for the allocation's
// life, and physical memory mapped into it. Swapping out copies each allocation to the swap space and releases its
// physical memory, keeping the range; swapping in maps new physical memory at the same address and copies back, so
// every pointer the application holds, and every kernel argument, graph and module that captured one, stays valid.
// Smaller allocations, pitched ones, arrays, pools and the application's own virtual memory stay where they are.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <string>

#include "executor/driver.h"

namespace curelay::executor {

class SwappableMemory {
 public:
  explicit SwappableMemory(Driver& driver) : driver_(driver) {}
  SwappableMemory(const SwappableMemory&) = delete;
  SwappableMemory& operator=(const SwappableMemory&) = delete;

  // Whether the driver offers the virtual memory API.
  bool Supported() const;
  // The physical size an allocation of `bytes` takes on `device` (whole granules); 0 if it cannot be movable.
  uint64_t MovableSize(int device, uint64_t bytes);
  // Allocates `bytes` as movable memory on `device` in `context` (current). CUDA_ERROR_OUT_OF_MEMORY leaves nothing.
  CUresult Allocate(CUcontext context, int device, uint64_t bytes, CUdeviceptr* ptr);
  bool Owns(CUdeviceptr ptr) const { return allocations_.count(ptr) != 0; }
  // Whether `ptr` lies inside a movable allocation (its base or any byte of it).
  bool Contains(CUdeviceptr ptr) const;
  // Frees a movable allocation (resident or not). CUDA_ERROR_INVALID_VALUE if `ptr` is not one.
  CUresult Free(CUdeviceptr ptr);
  uint64_t movable_bytes() const { return movable_bytes_; }
  bool empty() const { return allocations_.empty(); }
  // The device all movable memory is on; -1 when on several (or none).
  int SoleDevice() const;

  // Copies every allocation into `store` (at least movable_bytes(), page-locked or not) and releases its physical
  // memory. A copy never crosses a multiple of `piece_bytes` from the store's start (the swap space is page-locked
  // in pieces, and a copy reaching across two of them would run at the pageable rate). On failure everything stays
  // resident, as it was.
  CUresult SwapOut(uint8_t* store, uint64_t store_bytes, uint64_t piece_bytes);
  // Maps physical memory under every allocation swapped out again and copies it back from `store`, each from where
  // SwapOut put it. CUDA_ERROR_OUT_OF_MEMORY (another process took the memory meanwhile) leaves everything
  // swapped out, as it was.
  CUresult SwapIn(const uint8_t* store, uint64_t piece_bytes);
  bool swapped_out() const { return swapped_out_; }
  // Frees everything (session end).
  void ReleaseAll();

 private:
  struct Allocation {
    uint64_t size = 0;  // mapped: whole granules
    int device = 0;
    CUcontext context = nullptr;  // where it was made; copies run there
    CUmemGenericAllocationHandle handle = 0;  // 0 while swapped out
    uint64_t store_offset = 0;                // where SwapOut put it
    bool swapped_back = true;                 // SwapIn: false while this one's data is still in the store
  };
  // Copies `bytes` between device and host in pieces that never cross a multiple of `piece_bytes` from `store`.
  CUresult CopyPieces(bool to_host, CUdeviceptr device, uint8_t* store, uint64_t offset, uint64_t bytes,
                      uint64_t piece_bytes);
  CUresult MapPhysical(CUdeviceptr ptr, Allocation& allocation);
  void UnmapPhysical(CUdeviceptr ptr, Allocation& allocation);

  Driver& driver_;
  std::map<CUdeviceptr, Allocation> allocations_;  // by base address, in address order (the store's order)
  std::map<int, uint64_t> granularity_;             // by device
  uint64_t movable_bytes_ = 0;
  bool swapped_out_ = false;
};

}  // namespace curelay::executor
