// Virtual memory management on host memory: a reservation is a PROT_NONE range of the process's address space
// (device addresses are host addresses here), a physical allocation is a memfd, and mapping one into a
// reservation maps the file there. Only ranges whose access was set are entered in the MemoryMap (as borrowed
// blocks, adjacent mappings merged), so copies, memsets and kernels reach exactly what the real driver lets them.
// Multicast objects (CURELAY_EMU_MULTICAST=1) are generic allocation handles too: memory is bound to them per device,
// and mapping one maps the memory bound for its device. Stores through a multicast mapping cannot fan out to several
// devices' files, so the emulator maps an object of one device only (more answer CUDA_ERROR_NOT_SUPPORTED at
// cuMemMap), maps only ranges that are bound, and exports none.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "api_common.h"
#include "device_properties.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

// The real driver's granularity for device memory (minimum and recommended) on current GPUs.
constexpr size_t kGranularity = size_t{2} << 20;

// Memory bound to a multicast object for one device: `size` bytes of allocation `memory` from `memory_offset`.
struct MulticastBinding {
  uint64_t memory = 0;
  uint64_t memory_offset = 0;
  size_t size = 0;
};

struct MulticastObject {
  CUmulticastObjectProp prop{};
  std::vector<int> devices;                                      // in the order added
  std::map<std::pair<int, uint64_t>, MulticastBinding> bindings;  // by device, then offset into the object
};

struct PhysicalAllocation {
  std::unique_ptr<MulticastObject> multicast;  // set for a multicast object (no file of its own)
  int fd = -1;
  size_t size = 0;
  CUmemAllocationProp prop{};
  int references = 1;  // cuMemCreate and each cuMemRetainAllocationHandle; cuMemRelease drops one
  int mappings = 0;    // the memory lives on while mapped, even once released (a multicast mapping counts too)
  int bindings = 0;    // ... and while bound to a multicast object
  bool imported = false;  // from another process's export: its device memory is charged there
};

struct Mapping {
  size_t size = 0;
  uint64_t handle = 0;
  uint64_t offset = 0;  // into the allocation
  int device = 0;
  CUmemAccess_flags access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  std::vector<uint64_t> bound;  // a multicast mapping's: the memory it reaches, held while mapped
};

struct Reservation {
  size_t size = 0;
  std::map<uint64_t, Mapping> mappings;  // by address
  std::vector<uint64_t> entered;         // bases of the blocks this reservation has in the MemoryMap
};

struct VirtualMemory {
  std::mutex mu;
  std::map<uint64_t, Reservation> reservations;  // by base
  std::unordered_map<uint64_t, PhysicalAllocation> physical;
  uint64_t next_handle = 1;
};

VirtualMemory& State() {
  static auto* state = new VirtualMemory;  // never destroyed: device workers may outlive static destructors
  return *state;
}

bool Aligned(uint64_t value) { return value % kGranularity == 0; }

// The reservation holding all of [addr, addr + size), or nullptr.
Reservation* FindReservation(VirtualMemory& state, uint64_t addr, size_t size) {
  auto it = state.reservations.upper_bound(addr);
  if (it == state.reservations.begin()) return nullptr;
  --it;
  const uint64_t base = it->first;
  if (size > it->second.size || addr - base > it->second.size - size) return nullptr;
  return &it->second;
}

// The mapping holding `addr` and its base address, or nullptr.
const Mapping* FindMapping(VirtualMemory& state, uint64_t addr, uint64_t* base) {
  Reservation* reservation = FindReservation(state, addr, 1);
  if (reservation == nullptr) return nullptr;
  auto it = reservation->mappings.upper_bound(addr);
  if (it == reservation->mappings.begin()) return nullptr;
  --it;
  if (addr - it->first >= it->second.size) return nullptr;
  *base = it->first;
  return &it->second;
}

// Re-enters the accessible mappings of `reservation` in the MemoryMap, adjacent ones of a device as one block, so a
// copy or memset may cross from one mapping into the next as on the real device.
void EnterAccessible(Reservation& reservation) {
  MemoryMap& memory = Driver::Get().memory();
  for (uint64_t base : reservation.entered) memory.Release(base);
  reservation.entered.clear();
  uint64_t run_base = 0, run_end = 0;
  int run_device = -1;
  const auto flush = [&] {
    if (run_device < 0) return;
    memory.Insert(Allocation::Borrowed(reinterpret_cast<void*>(run_base), run_end - run_base, run_device));
    reservation.entered.push_back(run_base);
    run_device = -1;
  };
  for (const auto& [addr, mapping] : reservation.mappings) {
    if (mapping.access == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      flush();
      continue;
    }
    if (run_device == mapping.device && run_end == addr) {
      run_end = addr + mapping.size;
      continue;
    }
    flush();
    run_base = addr, run_end = addr + mapping.size, run_device = mapping.device;
  }
  flush();
}

void DropPhysicalIfUnused(VirtualMemory& state, uint64_t handle);

// Memory that multicast bindings held, given back.
void ReleaseBoundMemory(VirtualMemory& state, const std::vector<uint64_t>& bound) {
  for (uint64_t memory : bound) {
    auto found = state.physical.find(memory);
    if (found == state.physical.end()) continue;
    --found->second.bindings;
    DropPhysicalIfUnused(state, memory);
  }
}

void DropPhysicalIfUnused(VirtualMemory& state, uint64_t handle) {
  auto it = state.physical.find(handle);
  if (it == state.physical.end() || it->second.references > 0 || it->second.mappings > 0 ||
      it->second.bindings > 0) {
    return;
  }
  if (it->second.multicast != nullptr) {
    // Its bindings go with it.
    std::vector<uint64_t> bound;
    for (const auto& [key, binding] : it->second.multicast->bindings) bound.push_back(binding.memory);
    state.physical.erase(it);
    ReleaseBoundMemory(state, bound);
    return;
  }
  close(it->second.fd);
  // Its device memory is free again (an imported one's is the exporter's to free).
  if (!it->second.imported) Driver::Get().memory().UnchargePhysical(it->second.prop.location.id, it->second.size);
  state.physical.erase(it);
}

CUresult CheckDeviceLocation(const CUmemLocation& location) {
  if (location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  return location.id >= 0 && location.id < Driver::Get().device_count() ? CUDA_SUCCESS
                                                                          : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CheckProp(const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  // File descriptors are the one shareable handle emulated: the memfd itself (cuMemExportToShareableHandle).
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CheckDeviceLocation(prop->location);
}

// Maps the memory bound to `object` for [offset, offset + size) at `ptr`; `device` is set to the object's device.
CUresult MapMulticast(VirtualMemory& state, const MulticastObject& object, uint64_t ptr, size_t size, uint64_t offset,
                      int* device, std::vector<uint64_t>* reached) {
  if (object.devices.size() < object.prop.numDevices) return CUDA_ERROR_INVALID_VALUE;  // the real driver waits
  if (object.devices.size() != 1) return CUDA_ERROR_NOT_SUPPORTED;  // stores cannot fan out here
  *device = object.devices.front();
  std::vector<std::pair<uint64_t, const MulticastBinding*>> pieces;  // offset into the object, binding
  uint64_t next = offset;
  for (const auto& [key, binding] : object.bindings) {
    if (key.first != *device || key.second + binding.size <= offset || key.second >= offset + size) continue;
    if (key.second > next) break;  // a hole: unbound memory is not emulated
    pieces.emplace_back(key.second, &binding);
    next = key.second + binding.size;
  }
  if (next < offset + size) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [start, binding] : pieces) {
    const uint64_t from = std::max<uint64_t>(start, offset);
    const uint64_t to = std::min<uint64_t>(start + binding->size, offset + size);
    const PhysicalAllocation& memory = state.physical.at(binding->memory);
    void* mapped = mmap(reinterpret_cast<void*>(ptr + (from - offset)), to - from, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_FIXED, memory.fd, static_cast<off_t>(binding->memory_offset + (from - start)));
    if (mapped == MAP_FAILED) {
      mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
           -1, 0);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  // The mapping holds what it reaches, as a mapping of the memory itself would.
  for (const auto& [start, binding] : pieces) {
    ++state.physical.at(binding->memory).mappings;
    reached->push_back(binding->memory);
  }
  return CUDA_SUCCESS;
}

// A multicast entry point's body, run under the virtual memory lock once the driver is initialized and can multicast.
template <typename Body>
CUresult Multicast(Body body) {
  return Guard([&] {
    if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
    if (!MulticastSupported()) return CUDA_ERROR_NOT_SUPPORTED;
    VirtualMemory& state = State();
    std::lock_guard lock(state.mu);
    return body(state);
  });
}

// The multicast object `handle`, or nullptr.
MulticastObject* FindMulticast(VirtualMemory& state, uint64_t handle) {
  auto it = state.physical.find(handle);
  if (it == state.physical.end() || it->second.references == 0) return nullptr;
  return it->second.multicast.get();
}

CUresult CheckMulticastProp(const CUmulticastObjectProp* prop) {
  if (prop == nullptr || prop->numDevices == 0 || prop->flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (prop->numDevices > static_cast<unsigned>(Driver::Get().device_count())) return CUDA_ERROR_INVALID_VALUE;
  if (prop->handleTypes != CU_MEM_HANDLE_TYPE_NONE && prop->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

// cuMulticastBindMem's checks and the binding, once the memory is named by its handle.
CUresult BindMulticast(VirtualMemory& state, uint64_t handle, uint64_t offset, uint64_t memory,
                       uint64_t memory_offset, size_t size, unsigned long long flags) {
  MulticastObject* object = FindMulticast(state, handle);
  if (object == nullptr || flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!Aligned(offset) || !Aligned(memory_offset) || !Aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  if (object->devices.size() < object->prop.numDevices) return CUDA_ERROR_INVALID_VALUE;  // the real driver waits
  auto found = state.physical.find(memory);
  if (found == state.physical.end() || found->second.references == 0 || found->second.multicast != nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  PhysicalAllocation& bound = found->second;
  if (offset > object->prop.size || size > object->prop.size - offset || memory_offset > bound.size ||
      size > bound.size - memory_offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int device = bound.prop.location.id;
  if (std::find(object->devices.begin(), object->devices.end(), device) == object->devices.end()) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  for (const auto& [key, binding] : object->bindings) {
    if (key.first == device && key.second < offset + size && offset < key.second + binding.size) {
      return CUDA_ERROR_INVALID_VALUE;  // that range of the device is bound already
    }
  }
  object->bindings[{device, offset}] = {memory, memory_offset, size};
  ++bound.bindings;  // bound memory lives on until unbound
  return CUDA_SUCCESS;
}

// Device work queued before an unmap may still touch the range.
void DrainDevices() {
  Driver& driver = Driver::Get();
  for (int device = 0; device < driver.device_count(); ++device) {
    DeviceWorker& worker = driver.worker(device);
    worker.Wait(worker.last_submitted());
  }
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult r = emu::CheckProp(prop); r != CUDA_SUCCESS) return r;
    *granularity = emu::kGranularity;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (ptr == nullptr || size == 0 || !emu::Aligned(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (alignment == 0) alignment = emu::kGranularity;
    if ((alignment & (alignment - 1)) != 0 || !emu::Aligned(alignment)) return CUDA_ERROR_INVALID_VALUE;
    // Over-reserve, then trim to an aligned range; `addr` is only a hint, as for the real driver.
    const size_t span = size + alignment;
    void* hint = addr != 0 ? reinterpret_cast<void*>(addr) : nullptr;
    void* raw = mmap(hint, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    const auto start = reinterpret_cast<uint64_t>(raw);
    const uint64_t base = (start + alignment - 1) / alignment * alignment;
    if (base > start) munmap(raw, base - start);
    if (start + span > base + size) munmap(reinterpret_cast<void*>(base + size), start + span - (base + size));
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    state.reservations[base].size = size;
    *ptr = base;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    auto it = state.reservations.find(ptr);
    if (it == state.reservations.end() || it->second.size != size || !it->second.mappings.empty()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    munmap(reinterpret_cast<void*>(ptr), size);
    state.reservations.erase(it);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (handle == nullptr || size == 0 || !emu::Aligned(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = emu::CheckProp(prop); r != CUDA_SUCCESS) return r;
    // Physical memory counts against the device's capacity, as the real driver's does.
    if (!emu::Driver::Get().memory().ChargePhysical(prop->location.id, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    // The file's pages are committed when touched and read as zeros until then.
    const int fd = memfd_create("curelay-emulated-vmm", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
      if (fd >= 0) close(fd);
      emu::Driver::Get().memory().UnchargePhysical(prop->location.id, size);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    const uint64_t id = state.next_handle++;
    emu::PhysicalAllocation& physical = state.physical[id];
    physical.fd = fd;
    physical.size = size;
    physical.prop = *prop;
    *handle = id;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    auto it = state.physical.find(handle);
    if (it == state.physical.end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
    --it->second.references;
    emu::DropPhysicalIfUnused(state, handle);
    return CUDA_SUCCESS;
  });
}

// A physical allocation made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is exported as a duplicate of its memfd:
// another process that imports the descriptor maps the same pages, as two processes share one real GPU's memory.
CUresult CUDAAPI cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType type, unsigned long long flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (shareable == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    auto it = state.physical.find(handle);
    if (it == state.physical.end() || it->second.references == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (it->second.multicast != nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // no file to pass on
    if (it->second.prop.requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
      return CUDA_ERROR_INVALID_VALUE;  // not made shareable as a descriptor
    }
    const int fd = fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    *static_cast<int*>(shareable) = fd;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                                CUmemAllocationHandleType type) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    const int given = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
    struct stat info {};
    // A memfd of an emulated allocation is a regular file of whole granules; anything else names no allocation.
    if (given < 0 || fstat(given, &info) != 0 || !S_ISREG(info.st_mode) || info.st_size <= 0 ||
        !emu::Aligned(static_cast<uint64_t>(info.st_size))) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const int fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    const uint64_t id = state.next_handle++;
    emu::PhysicalAllocation& physical = state.physical[id];
    physical.fd = fd;
    physical.size = static_cast<size_t>(info.st_size);
    physical.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    physical.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    physical.prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    physical.imported = true;
    *handle = id;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (size == 0 || flags != 0 || !emu::Aligned(ptr) || !emu::Aligned(size) || !emu::Aligned(offset)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    auto physical = state.physical.find(handle);
    if (physical == state.physical.end() || physical->second.references == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (offset > physical->second.size || size > physical->second.size - offset) return CUDA_ERROR_INVALID_VALUE;
    emu::Reservation* reservation = emu::FindReservation(state, ptr, size);
    if (reservation == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (const auto& [addr, mapping] : reservation->mappings) {
      if (addr < ptr + size && ptr < addr + mapping.size) return CUDA_ERROR_INVALID_VALUE;  // already mapped
    }
    int device = physical->second.prop.location.id;
    std::vector<uint64_t> reached;
    if (physical->second.multicast != nullptr) {
      if (CUresult r = emu::MapMulticast(state, *physical->second.multicast, ptr, size, offset, &device, &reached);
          r != CUDA_SUCCESS) {
        return r;
      }
    } else {
      void* mapped = mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                          physical->second.fd, static_cast<off_t>(offset));
      if (mapped == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    reservation->mappings[ptr] = {size, handle, offset, device, CU_MEM_ACCESS_FLAGS_PROT_NONE, std::move(reached)};
    ++physical->second.mappings;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    emu::VirtualMemory& state = emu::State();
    std::unique_lock lock(state.mu);
    emu::Reservation* reservation = emu::FindReservation(state, ptr, size);
    if (reservation == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // The range must consist of whole mappings, with nothing unmapped in it.
    uint64_t next = ptr;
    for (auto it = reservation->mappings.lower_bound(ptr); it != reservation->mappings.end() && it->first < ptr + size;
         ++it) {
      if (it->first != next) return CUDA_ERROR_INVALID_VALUE;
      next += it->second.size;
    }
    if (next != ptr + size) return CUDA_ERROR_INVALID_VALUE;
    auto first = reservation->mappings.lower_bound(ptr);
    auto last = reservation->mappings.lower_bound(ptr + size);
    std::vector<uint64_t> handles;  // each mapping's allocation, and what a multicast mapping reached
    for (auto it = first; it != last; ++it) {
      handles.push_back(it->second.handle);
      handles.insert(handles.end(), it->second.bound.begin(), it->second.bound.end());
    }
    reservation->mappings.erase(first, last);
    emu::EnterAccessible(*reservation);
    lock.unlock();
    emu::DrainDevices();
    lock.lock();
    mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
         0);
    for (uint64_t handle : handles) {
      auto physical = state.physical.find(handle);
      if (physical == state.physical.end()) continue;
      --physical->second.mappings;
      emu::DropPhysicalIfUnused(state, handle);
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; ++i) {
      if (CUresult r = emu::CheckDeviceLocation(desc[i].location); r != CUDA_SUCCESS) return r;
      if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
          desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    emu::Reservation* reservation = emu::FindReservation(state, ptr, size);
    if (reservation == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // Every byte of the range must be mapped.
    std::vector<emu::Mapping*> covered;
    uint64_t next = ptr;
    auto it = reservation->mappings.upper_bound(ptr);
    if (it != reservation->mappings.begin()) --it;
    for (; it != reservation->mappings.end() && it->first < ptr + size; ++it) {
      if (it->first + it->second.size <= ptr) continue;
      if (it->first > next) return CUDA_ERROR_INVALID_VALUE;
      next = it->first + it->second.size;
      covered.push_back(&it->second);
    }
    if (next < ptr + size) return CUDA_ERROR_INVALID_VALUE;
    // The emulated devices share one memory: the last descriptor naming a device sets the access of the mapping.
    for (emu::Mapping* mapping : covered) {
      for (size_t i = 0; i < count; ++i) mapping->access = desc[i].flags;
    }
    emu::EnterAccessible(*reservation);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = emu::CheckDeviceLocation(*location); r != CUDA_SUCCESS) return r;
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    uint64_t base = 0;
    const emu::Mapping* mapping = emu::FindMapping(state, ptr, &base);
    if (mapping == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *flags = mapping->access;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto ptr = reinterpret_cast<uint64_t>(addr);
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    uint64_t base = 0;
    const emu::Mapping* mapping = emu::FindMapping(state, ptr, &base);
    if (mapping == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ++state.physical.at(mapping->handle).references;
    *handle = mapping->handle;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::VirtualMemory& state = emu::State();
    std::lock_guard lock(state.mu);
    auto it = state.physical.find(handle);
    if (it == state.physical.end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
    *prop = it->second.prop;
    return CUDA_SUCCESS;
  });
}


CUresult CUDAAPI cuMulticastGetGranularity(size_t* granularity, const CUmulticastObjectProp* prop,
                                           CUmulticastGranularity_flags option) {
  return emu::Multicast([&](emu::VirtualMemory&) {
    if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MULTICAST_GRANULARITY_MINIMUM && option != CU_MULTICAST_GRANULARITY_RECOMMENDED) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult r = emu::CheckMulticastProp(prop); r != CUDA_SUCCESS) return r;
    *granularity = emu::kGranularity;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMulticastCreate(CUmemGenericAllocationHandle* handle, const CUmulticastObjectProp* prop) {
  return emu::Multicast([&](emu::VirtualMemory& state) {
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = emu::CheckMulticastProp(prop); r != CUDA_SUCCESS) return r;
    if (prop->size == 0 || !emu::Aligned(prop->size)) return CUDA_ERROR_INVALID_VALUE;
    const uint64_t id = state.next_handle++;
    emu::PhysicalAllocation& physical = state.physical[id];
    physical.multicast = std::make_unique<emu::MulticastObject>();
    physical.multicast->prop = *prop;
    physical.size = prop->size;
    physical.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    physical.prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(prop->handleTypes);
    physical.prop.location = {CU_MEM_LOCATION_TYPE_INVALID, 0};
    *handle = id;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMulticastAddDevice(CUmemGenericAllocationHandle handle, CUdevice dev) {
  return emu::Multicast([&](emu::VirtualMemory& state) {
    emu::MulticastObject* object = emu::FindMulticast(state, handle);
    if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
    if (object->devices.size() == object->prop.numDevices ||
        std::find(object->devices.begin(), object->devices.end(), dev) != object->devices.end()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    object->devices.push_back(dev);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMulticastBindMem(CUmemGenericAllocationHandle handle, size_t offset,
                                    CUmemGenericAllocationHandle memory, size_t memory_offset, size_t size,
                                    unsigned long long flags) {
  return emu::Multicast([&](emu::VirtualMemory& state) {
    return emu::BindMulticast(state, handle, offset, memory, memory_offset, size, flags);
  });
}

CUresult CUDAAPI cuMulticastBindAddr(CUmemGenericAllocationHandle handle, size_t offset, CUdeviceptr address,
                                     size_t size, unsigned long long flags) {
  return emu::Multicast([&](emu::VirtualMemory& state) {
    // The address must lie in one mapping of a memory allocation, for all of `size`.
    uint64_t base = 0;
    const emu::Mapping* mapping = emu::FindMapping(state, address, &base);
    if (mapping == nullptr || size > mapping->size - (address - base)) return CUDA_ERROR_INVALID_VALUE;
    return emu::BindMulticast(state, handle, offset, mapping->handle, mapping->offset + (address - base), size, flags);
  });
}

CUresult CUDAAPI cuMulticastUnbind(CUmemGenericAllocationHandle handle, CUdevice dev, size_t offset, size_t size) {
  return emu::Multicast([&](emu::VirtualMemory& state) {
    emu::MulticastObject* object = emu::FindMulticast(state, handle);
    if (object == nullptr || size == 0 || !emu::Aligned(offset) || !emu::Aligned(size)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
    // Whole bindings of the device inside the range go.
    std::vector<uint64_t> unbound;
    for (auto it = object->bindings.begin(); it != object->bindings.end();) {
      const auto& [key, binding] = *it;
      if (key.first == dev && key.second >= offset && key.second + binding.size <= offset + size) {
        unbound.push_back(binding.memory);
        it = object->bindings.erase(it);
      } else {
        ++it;
      }
    }
    if (unbound.empty()) return CUDA_ERROR_INVALID_VALUE;
    emu::ReleaseBoundMemory(state, unbound);
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
