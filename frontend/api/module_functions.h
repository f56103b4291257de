// A module's functions in the driver's order, shared by cuModuleEnumerateFunctions and the ToolsModule export
// table's enumeration slot (which cuFFT loads its kernels through); and the end of a module's handles, shared by
// cuModuleUnload and cuLibraryUnload.
#pragma once

#include <vector>

#include "frontend/client/client.h"

namespace curelay::frontend {

// Each function is this process's function object for that name, as cuModuleGetFunction hands out.
CUresult ModuleFunctions(CUmodule module, std::vector<CUfunction>* functions);

// Destroys the module's handle with those of its functions and texture and surface references (once the executor
// has unloaded it).
void DestroyModuleHandles(Client& client, CUmodule module);

}  // namespace curelay::frontend
