// Emulated device memory: host memory blocks tracked in an interval map so
// that every device pointer handed to the API or dereferenced by an emulated
// kernel can be validated, and so that per-device capacity can be enforced.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_MEMORY_MAP_H_
#define CURELAY_TESTS_EMULATED_DRIVER_MEMORY_MAP_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <atomic>
#include <shared_mutex>
#include <string>
#include <vector>

#include "cuda_api.h"

namespace curelay::emulated {

// Device allocations are aligned like the real driver's (cuMemAlloc
// guarantees at least 256 bytes).
inline constexpr size_t kDeviceAllocAlignment = 256;

// One block of emulated device memory (cuMemAlloc or a module global). The
// backing storage lives as long as any holder of the shared_ptr, so a kernel
// running on the device worker can never touch freed host memory.
class Allocation {
 public:
  Allocation(void* storage, size_t size, size_t charged, bool mmapped, int device,
             uint64_t owner);
  // A block whose storage someone else manages (virtual memory mappings): never freed here.
  static std::shared_ptr<Allocation> Borrowed(void* storage, size_t size, int device);
  ~Allocation();
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  uint64_t base() const { return reinterpret_cast<uint64_t>(storage_); }
  uint8_t* data() const { return static_cast<uint8_t*>(storage_); }
  size_t size() const { return size_; }
  // Bytes counted against the device capacity.
  size_t charged() const { return charged_; }
  int device() const { return device_; }
  // Handle value of the context or module that owns the block.
  uint64_t owner() const { return owner_; }
  // A memfd behind a large block's pages (-1 for heap blocks): another process maps it to open a CUDA IPC handle.
  int share_fd() const { return share_fd_; }
  void set_share_fd(int fd) { share_fd_ = fd; }
  // A module's __managed__ variable (CU_POINTER_ATTRIBUTE_IS_MANAGED).
  bool managed() const { return managed_; }
  void set_managed(bool managed) { managed_ = managed; }
  // CU_POINTER_ATTRIBUTE_SYNC_MEMOPS (cuPointerSetAttribute): synchronous memsets of the block return only when done.
  bool sync_memops() const { return sync_memops_.load(); }
  void set_sync_memops(bool sync) { sync_memops_.store(sync); }

  // bytes == 0 asks whether addr itself lies inside the block.
  bool Contains(uint64_t addr, size_t bytes) const {
    const size_t n = bytes == 0 ? 1 : bytes;
    return addr >= base() && n <= size_ && addr - base() <= size_ - n;
  }

 private:
  void* storage_;
  size_t size_;
  size_t charged_;
  bool mmapped_;
  int device_;
  uint64_t owner_;
  int share_fd_ = -1;
  bool managed_ = false;
  std::atomic<bool> sync_memops_{false};
};

class MemoryMap {
 public:
  // Sets the number of devices and the capacity of each. Called once by cuInit.
  // `physical_devices`: the emulated GPU behind each ordinal (whose capacity a shared file shares across processes).
  void Configure(const std::vector<int>& physical_devices, size_t capacity_per_device);

  // CUDA_ERROR_INVALID_VALUE for size 0, CUDA_ERROR_OUT_OF_MEMORY when the
  // device capacity (or host memory) is exhausted.
  CUresult Allocate(int device, size_t size, uint64_t owner, std::shared_ptr<Allocation>* out);

  // Enters a borrowed block (Allocation::Borrowed); nothing is charged against capacity.
  void Insert(std::shared_ptr<Allocation> allocation);

  // Maps again a block that Release unmapped (a graph allocation while it lives), charging its capacity:
  // CUDA_ERROR_OUT_OF_MEMORY when the device is full.
  CUresult Map(std::shared_ptr<Allocation> allocation);

  // Unmaps the allocation starting exactly at `base`; nullptr if there is none.
  std::shared_ptr<Allocation> Release(uint64_t base);
  // Unmaps every allocation owned by `owner` (context or module teardown).
  std::vector<std::shared_ptr<Allocation>> ReleaseOwnedBy(uint64_t owner);

  // The allocation holding all of [addr, addr + bytes) (bytes may be 0), or
  // nullptr. device < 0 accepts any device (unified addressing).
  std::shared_ptr<Allocation> Find(uint64_t addr, size_t bytes, int device = -1) const;

  size_t capacity() const;
  // What the device holds: across every process sharing it when its capacity is shared, as the real driver's
  // cuMemGetInfo counts every process's memory.
  size_t used(int device) const;
  // Physical memory made outside blocks (cuMemCreate): charged against the device's capacity like a block;
  // false (nothing charged) when it does not fit.
  bool ChargePhysical(int device, size_t bytes);
  void UnchargePhysical(int device, size_t bytes);

  // Makes every process that names the same file share each device's capacity, as processes share one real GPU
  // (CURELAY_EMU_SHARED_MEMORY_FILE). Memory of a process that dies without freeing stays counted there.
  bool ShareCapacity(const std::string& path, std::string* error);

 private:
  bool ChargeShared(int device, size_t bytes);
  void UnchargeShared(int device, size_t bytes);

  mutable std::shared_mutex mu_;
  std::map<uint64_t, std::shared_ptr<Allocation>> by_base_;
  std::vector<size_t> used_;
  size_t capacity_ = 0;
  std::atomic<uint64_t>* shared_used_ = nullptr;  // per physical device, in the shared file; null: not shared
  std::vector<int> physical_devices_;
};

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_MEMORY_MAP_H_
