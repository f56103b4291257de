// Kernel launches: arguments are packed here by the function's parameter layout and the launch is posted; the
// application does not wait for it, exactly as with the real driver.
#include <cstring>
#include <vector>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// Fills `buffer` from either kernelParams (one pointer per parameter) or the `extra` buffer form.
CUresult PackArguments(const CUfunc_st& function, void** kernel_params, void** extra,
                       std::vector<uint8_t>& buffer) {
  if (kernel_params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (extra != nullptr) {
    const void* data = nullptr;
    const size_t* size = nullptr;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        data = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        size = static_cast<const size_t*>(extra[i + 1]);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (data == nullptr || size == nullptr || *size < function.argument_bytes) return CUDA_ERROR_INVALID_VALUE;
    const auto* bytes = static_cast<const uint8_t*>(data);
    buffer.assign(bytes, bytes + function.argument_bytes);
    return CUDA_SUCCESS;
  }
  buffer.assign(function.argument_bytes, 0);
  if (function.param_offsets.empty()) return CUDA_SUCCESS;
  if (kernel_params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < function.param_offsets.size(); ++i) {
    if (kernel_params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(buffer.data() + function.param_offsets[i], kernel_params[i], function.param_sizes[i]);
  }
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" CUresult cuLaunchKernel(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                                   unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                   unsigned int block_z, unsigned int shared_mem_bytes, CUstream stream,
                                   void** kernel_params, void** extra) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (function == nullptr || !client->functions.Contains(function)) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  thread_local std::vector<uint8_t> arguments;
  CURELAY_RETURN_IF_ERROR(PackArguments(*function, kernel_params, extra, arguments));
  auto& builder = Builder();
  const auto call = wire::CreateLaunchKernel(builder, function->id, grid_x, grid_y, grid_z, block_x, block_y,
                                             block_z, shared_mem_bytes, wire_stream)
                        .Union();
  return client->Post(builder, wire::Call::LaunchKernel, call, arguments);
}
