#include "executor/virtual_memory.h"

#include <spdlog/spdlog.h>

#include <iterator>

namespace curelay::executor {

VirtualMemory::Physical* VirtualMemory::Find(uint64_t id) {
  const auto found = physicals_.find(id);
  return found != physicals_.end() ? &found->second : nullptr;
}

void VirtualMemory::Add(uint64_t id, CUmemGenericAllocationHandle handle, uint64_t bytes) {
  TakeBackReusedHandle(handle);
  physicals_[id] = {handle, 1, bytes};
}

uint64_t VirtualMemory::Retained(CUmemGenericAllocationHandle handle, uint64_t proposed_id) {
  for (auto& [id, physical] : physicals_) {
    if (physical.handle == handle) {
      ++physical.references;
      return id;
    }
  }
  if (proposed_id == 0 || physicals_.count(proposed_id) != 0) return 0;
  uint64_t bytes = 0;
  if (const auto released = released_while_mapped_.find(handle); released != released_while_mapped_.end()) {
    bytes = released->second;
    released_while_mapped_.erase(released);
  }
  physicals_[proposed_id] = {handle, 1, bytes};
  return proposed_id;
}

bool VirtualMemory::Released(uint64_t id) {
  const auto found = physicals_.find(id);
  if (found == physicals_.end() || --found->second.references > 0) return false;
  released_while_mapped_[found->second.handle] += found->second.bytes;
  physicals_.erase(found);
  return true;
}

void VirtualMemory::Mapped(CUdeviceptr ptr, uint64_t bytes, CUmemGenericAllocationHandle handle) {
  mappings_[ptr] = {bytes, handle};
  ++mappings_per_handle_[handle];
}

void VirtualMemory::Unmapped(CUdeviceptr ptr, uint64_t bytes) {
  const auto first = mappings_.lower_bound(ptr);
  const auto last = mappings_.lower_bound(ptr + bytes);
  for (auto it = first; it != last; ++it) {
    const auto count = mappings_per_handle_.find(it->second.handle);
    if (count != mappings_per_handle_.end() && --count->second == 0) mappings_per_handle_.erase(count);
  }
  mappings_.erase(first, last);
}

CUmemGenericAllocationHandle VirtualMemory::MappedAt(CUdeviceptr address) const {
  auto mapping = mappings_.upper_bound(address);
  if (mapping == mappings_.begin()) return 0;
  --mapping;
  return address - mapping->first < mapping->second.bytes ? mapping->second.handle : 0;
}

void VirtualMemory::Bound(uint64_t multicast, const MulticastBinding& binding) {
  multicast_bindings_[multicast].push_back(binding);
  ++bindings_per_handle_[binding.memory];
}

void VirtualMemory::Unbound(uint64_t multicast, int device, uint64_t offset, uint64_t bytes) {
  const auto bindings = multicast_bindings_.find(multicast);
  if (bindings == multicast_bindings_.end()) return;
  std::erase_if(bindings->second, [&](const MulticastBinding& binding) {
    const bool inside = binding.device == device && binding.offset >= offset && binding.offset - offset <= bytes &&
                        binding.bytes <= bytes - (binding.offset - offset);
    if (inside) {
      if (const auto count = bindings_per_handle_.find(binding.memory);
          count != bindings_per_handle_.end() && --count->second == 0) {
        bindings_per_handle_.erase(count);
      }
    }
    return inside;
  });
  if (bindings->second.empty()) multicast_bindings_.erase(bindings);
}

bool VirtualMemory::StillHeld(CUmemGenericAllocationHandle handle) const {
  if (mappings_per_handle_.count(handle) != 0 || bindings_per_handle_.count(handle) != 0) return true;
  const auto backing = sparse_backings_.find(handle);
  return backing != sparse_backings_.end() && !backing->second.empty();
}

void VirtualMemory::TakeBackReusedHandle(CUmemGenericAllocationHandle handle) {
  if (const auto released = released_while_mapped_.find(handle); released != released_while_mapped_.end()) {
    quota_.Refund(released->second);
    released_while_mapped_.erase(released);
  }
  sparse_backings_.erase(handle);
}

void VirtualMemory::Settle(const ResourceExists& resource_exists) {
  // Resources destroyed since (a mipmapped array takes its levels with it) back nothing any more, whether or not
  // their memory was released yet (a later array of the same id must not keep it charged).
  for (auto backing = sparse_backings_.begin(); backing != sparse_backings_.end();) {
    std::erase_if(backing->second, [&](const std::pair<bool, uint64_t>& resource) {
      return !resource_exists(resource.first, resource.second);
    });
    backing = backing->second.empty() ? sparse_backings_.erase(backing) : std::next(backing);
  }
  std::erase_if(released_while_mapped_, [&](const auto& entry) {
    if (StillHeld(entry.first)) return false;
    quota_.Refund(entry.second);
    sparse_backings_.erase(entry.first);
    return true;
  });
}

void VirtualMemory::Release() {
  if (driver_.cuMulticastUnbind != nullptr) {
    for (const auto& [id, bindings] : multicast_bindings_) {
      // An object the client released is gone from the session's handles, and with it any way to unbind.
      const auto multicast = physicals_.find(id);
      if (multicast == physicals_.end()) continue;
      for (const MulticastBinding& binding : bindings) {
        if (const CUresult result =
                driver_.cuMulticastUnbind(multicast->second.handle, binding.device, binding.offset, binding.bytes);
            result != CUDA_SUCCESS) {
          spdlog::warn("cuMulticastUnbind of a binding the session left: error {}", static_cast<int>(result));
        }
      }
    }
  }
  if (driver_.cuMemUnmap != nullptr) {
    for (const auto& [ptr, mapping] : mappings_) {
      if (const CUresult result = driver_.cuMemUnmap(ptr, mapping.bytes); result != CUDA_SUCCESS) {
        spdlog::warn("cuMemUnmap of a mapping the session left: error {}", static_cast<int>(result));
      }
    }
  }
  if (driver_.cuMemRelease != nullptr) {
    for (auto& [id, physical] : physicals_) {
      while (physical.references-- > 0) driver_.cuMemRelease(physical.handle);
    }
  }
  if (driver_.cuMemAddressFree != nullptr) {
    for (const auto& [ptr, bytes] : reservations_) driver_.cuMemAddressFree(ptr, bytes);
  }
  multicast_bindings_.clear();
  bindings_per_handle_.clear();
  mappings_.clear();
  mappings_per_handle_.clear();
  physicals_.clear();
  released_while_mapped_.clear();
  sparse_backings_.clear();
  reservations_.clear();
}

}  // namespace curelay::executor
