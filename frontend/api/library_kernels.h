// Binding a library kernel to the current context, shared by cuKernelGetFunction and launches given a CUkernel.
#pragma once

#include "frontend/client/client.h"

namespace curelay::frontend {

CUresult KernelFunction(Client& client, CUkernel kernel, CUfunction* function);

}  // namespace curelay::frontend
