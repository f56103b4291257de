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
// A managed global of module `module_id` or library `library_id` (one is 0) that the executor looked up at
// [address, +bytes): this process's pages there become a file the executor keeps in step with the variable, copying
// in `context` (the module's; 0 for a library's, which belongs to no context) (managed_memory.cc). NOT_SUPPORTED
// over a network, or when the address is taken here (by this process, or by another owner's variables).
CUresult ShareManagedGlobal(Client& client, uint64_t module_id, uint64_t library_id, uint64_t context,
                            CUdeviceptr address, size_t bytes);
// `result` of a global's look-up; over a network a NOT_SUPPORTED one is a managed global the executor refused, said
// once here too (the application may crash on the null pointer the CUDA runtime is then left with).
CUresult NoteRefusedManagedGlobal(Client& client, const char* name, CUresult result);
// Unmaps the pages of the managed globals of a module or library being unloaded, or (both 0) of a context being
// destroyed.
void ForgetManagedGlobals(Client& client, uint64_t module_id, uint64_t library_id, uint64_t context = 0);
// Whether [address, +bytes) overlaps shared managed-global pages: a plain copy there is waited for, so that its
// answer brings the variable's new bytes into this process's pages before the application reads them (as
// cudaMemcpyToSymbol followed by a host read does).
bool TouchesManagedGlobals(Client& client, CUdeviceptr address, size_t bytes);

}  // namespace curelay::frontend
