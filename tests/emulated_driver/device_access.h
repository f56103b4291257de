// Device memory as seen by one emulated kernel. Every load and store is
// checked the way the GPU's MMU and LSU would: the address must be naturally
// aligned (else CUDA_ERROR_MISALIGNED_ADDRESS) and lie in memory mapped for
// the device, i.e. an allocation of that device or registered host memory
// (else CUDA_ERROR_ILLEGAL_ADDRESS). A bad kernel pointer therefore becomes
// a sticky device fault, never a host crash.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_DEVICE_ACCESS_H_
#define CURELAY_TESTS_EMULATED_DRIVER_DEVICE_ACCESS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "cuda_api.h"
#include "host_registry.h"
#include "memory_map.h"

namespace curelay::emulated {

class DeviceAccess {
 public:
  DeviceAccess(const MemoryMap& memory, const HostRegistry& host, int device)
      : memory_(memory), host_(host), device_(device) {}

  // Host address backing `bytes` at device address `addr`, or nullptr once a
  // fault has been recorded (the first fault wins, as on the GPU).
  uint8_t* Resolve(uint64_t addr, size_t bytes);

  // Host address of [addr, addr + bytes) if it lies within one mapping,
  // else nullptr without recording a fault: callers fall back to element
  // accesses, which find the precise faulting address.
  uint8_t* TryResolveRange(uint64_t addr, size_t bytes);

  template <typename T>
  bool Load(uint64_t addr, T* value) {
    const uint8_t* p = Resolve(addr, sizeof(T));
    if (p == nullptr) return false;
    std::memcpy(value, p, sizeof(T));
    return true;
  }

  template <typename T>
  bool Store(uint64_t addr, const T& value) {
    uint8_t* p = Resolve(addr, sizeof(T));
    if (p == nullptr) return false;
    std::memcpy(p, &value, sizeof(T));
    return true;
  }

  CUresult fault() const { return fault_; }

 private:
  // A few recently used mappings, so a kernel streaming through several
  // buffers does not take the map lock per element. Pinning the allocation
  // also keeps its storage alive for the whole launch.
  struct Window {
    uint64_t lo = 0;
    uint64_t hi = 0;
    std::shared_ptr<Allocation> pin;
  };

  const MemoryMap& memory_;
  const HostRegistry& host_;
  const int device_;
  std::array<Window, 4> windows_{};
  size_t next_victim_ = 0;
  CUresult fault_ = CUDA_SUCCESS;
};

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_DEVICE_ACCESS_H_
