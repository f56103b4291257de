// Page-locked host memory shared with a same-host executor (frontend/api/memory.cc), for the families that build
// on it: managed memory (managed_memory.cc).
#pragma once

#include <cuda.h>

#include <cstddef>

#include "frontend/client/client.h"

namespace curelay::frontend {

// A shared file mapped here and mapped and registered by the executor; `managed`: it must have the same address
// there (its device address is then its host address) and is recorded as managed.
CUresult AllocateSharedHostMemory(Client& client, size_t bytes, unsigned int flags, bool managed, void** ptr);
// Has the executor unregister and unmap the host memory it knows at `device_ptr`.
CUresult UnregisterFromExecutor(Client& client, CUdeviceptr device_ptr);

}  // namespace curelay::frontend
