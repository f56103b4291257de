// Kernel launches: arguments are packed here by the function's parameter layout and the launch is posted; the
// application does not wait for it, exactly as with the real driver.
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/api/library_kernels.h"
#include "frontend/launch/argument_packing.h"

using namespace curelay;
using namespace curelay::frontend;

extern "C" CUresult cuLaunchKernel(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                                   unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                   unsigned int block_z, unsigned int shared_mem_bytes, CUstream stream,
                                   void** kernel_params, void** extra) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!client->functions.Contains(function)) {
    // The runtime launches library kernels by passing the CUkernel where a CUfunction goes.
    const auto kernel = reinterpret_cast<CUkernel>(function);
    if (!client->kernels.Contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
    CURELAY_RETURN_IF_ERROR(KernelFunction(*client, kernel, &function));
  }
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  std::vector<uint8_t>& arguments = ArgumentBuffer();
  CURELAY_RETURN_IF_ERROR(PackArguments(function->parameters, kernel_params, extra, arguments));
  auto& builder = Builder();
  const auto call = wire::CreateLaunchKernel(builder, function->id, grid_x, grid_y, grid_z, block_x, block_y,
                                             block_z, shared_mem_bytes, wire_stream)
                        .Union();
  return client->Post(builder, wire::Call::LaunchKernel, call, arguments);
}
