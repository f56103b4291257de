// A module's functions in the driver's order, shared by cuModuleEnumerateFunctions and the ToolsModule export
// table's enumeration slot (which cuFFT loads its kernels through).
#pragma once

#include <vector>

#include "frontend/client/client.h"

namespace curelay::frontend {

// Each function is this process's function object for that name, as cuModuleGetFunction hands out.
CUresult ModuleFunctions(CUmodule module, std::vector<CUfunction>* functions);

}  // namespace curelay::frontend
