// Kernel launches: arguments are packed here by the function's parameter layout and the launch is posted; the
// application does not wait for it, exactly as with the real driver.
#include <vector>

#include "frontend/api/api_support.h"
#include "frontend/api/library_kernels.h"
#include "frontend/launch/argument_packing.h"
#include "frontend/launch/launch_attributes.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// Resolves what the application passed as a CUfunction: the runtime launches library kernels by passing the
// CUkernel where a CUfunction goes.
CUresult ResolveFunction(Client& client, CUfunction* function) {
  if (*function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (client.functions.Contains(*function)) return CUDA_SUCCESS;
  const auto kernel = reinterpret_cast<CUkernel>(*function);
  if (!client.kernels.Contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  return KernelFunction(client, kernel, function);
}

// Every launch form ends here: arguments packed by the function's parameter layout, the launch posted.
CUresult PostLaunch(CUfunction function, const CUlaunchConfig& config, void** kernel_params, void** extra) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  CURELAY_RETURN_IF_ERROR(ResolveFunction(*client, &function));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, config.hStream, &wire_stream));
  std::vector<uint8_t>& arguments = ArgumentBuffer();
  CURELAY_RETURN_IF_ERROR(PackArguments(function->parameters, kernel_params, extra, arguments));
  // A kernel that is given a pointer into mirrored page-locked memory makes that mirror take part in coherence.
  client->host_mirrors.ActivateReferenced(arguments);
  auto& builder = Builder();
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::LaunchAttribute>>> attributes;
  if (config.numAttrs != 0) {
    if (config.attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CURELAY_RETURN_IF_ERROR(
        EncodeLaunchAttributes(*client, {config.attrs, config.numAttrs}, builder, &attributes));
  }
  const auto call = wire::CreateLaunchKernel(builder, function->id, config.gridDimX, config.gridDimY,
                                             config.gridDimZ, config.blockDimX, config.blockDimY,
                                             config.blockDimZ, config.sharedMemBytes, wire_stream, attributes)
                        .Union();
  return client->Post(builder, wire::Call::LaunchKernel, call, arguments);
}

CUlaunchConfig MakeConfig(unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                          unsigned int block_y, unsigned int block_z, unsigned int shared_mem_bytes,
                          CUstream stream) {
  CUlaunchConfig config{};
  config.gridDimX = grid_x;
  config.gridDimY = grid_y;
  config.gridDimZ = grid_z;
  config.blockDimX = block_x;
  config.blockDimY = block_y;
  config.blockDimZ = block_z;
  config.sharedMemBytes = shared_mem_bytes;
  config.hStream = stream;
  return config;
}

}  // namespace

extern "C" CUresult cuLaunchKernel(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                                   unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                   unsigned int block_z, unsigned int shared_mem_bytes, CUstream stream,
                                   void** kernel_params, void** extra) {
  return PostLaunch(function, MakeConfig(grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem_bytes, stream),
                    kernel_params, extra);
}

extern "C" CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction function, void** kernel_params,
                                     void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return PostLaunch(function, *config, kernel_params, extra);
}

extern "C" CUresult cuLaunchCooperativeKernel(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                                              unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                              unsigned int block_z, unsigned int shared_mem_bytes, CUstream stream,
                                              void** kernel_params) {
  CUlaunchConfig config =
      MakeConfig(grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem_bytes, stream);
  CUlaunchAttribute cooperative{};
  cooperative.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  cooperative.value.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  return PostLaunch(function, config, kernel_params, nullptr);
}

// The deprecated multi-device form, forwarded and answered: the executor's driver launches the entries together
// (its checks, its co-scheduling and the kernels' multi-grid synchronization are the driver's). Each entry's function
// is resolved in its stream's context (a library kernel passed as a CUfunction takes the stream's context, as cuda.h
// says) and its arguments packed by that function's layout, 8-byte aligned one after the other in the payload.
extern "C" CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* list, unsigned int count,
                                                         unsigned int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (list == nullptr || count == 0 || count > wire::kMostMultiDeviceLaunches) return CUDA_ERROR_INVALID_VALUE;
  std::vector<wire::MultiDeviceLaunch> launches;
  std::vector<uint8_t> payload;
  for (unsigned int i = 0; i < count; ++i) {
    const CUDA_LAUNCH_PARAMS& entry = list[i];
    CUfunction function = entry.function;
    const bool created_stream =
        entry.hStream != nullptr && entry.hStream != CU_STREAM_LEGACY && entry.hStream != CU_STREAM_PER_THREAD;
    CUcontext context = nullptr;
    if (created_stream) CURELAY_RETURN_IF_ERROR(cuStreamGetCtx(entry.hStream, &context));
    if (context != nullptr) CURELAY_RETURN_IF_ERROR(cuCtxPushCurrent(context));
    CUresult result = ResolveFunction(*client, &function);
    uint64_t wire_stream = 0;
    if (result == CUDA_SUCCESS) result = WireStream(*client, entry.hStream, &wire_stream);
    if (context != nullptr) {
      CUcontext popped = nullptr;
      cuCtxPopCurrent(&popped);
    }
    CURELAY_RETURN_IF_ERROR(result);
    std::vector<uint8_t>& arguments = ArgumentBuffer();
    CURELAY_RETURN_IF_ERROR(PackArguments(function->parameters, entry.kernelParams, nullptr, arguments));
    payload.resize((payload.size() + 7) & ~size_t{7});
    const uint64_t offset = payload.size();
    payload.insert(payload.end(), arguments.begin(), arguments.end());
    // A kernel that is given a pointer into mirrored page-locked memory makes that mirror take part in coherence.
    client->host_mirrors.ActivateReferenced(arguments);
    launches.emplace_back(function->id, wire_stream, offset, arguments.size(), entry.gridDimX, entry.gridDimY,
                          entry.gridDimZ, entry.blockDimX, entry.blockDimY, entry.blockDimZ, entry.sharedMemBytes);
  }
  auto& builder = Builder();
  const auto call =
      wire::CreateLaunchCooperativeMultiDevice(builder, builder.CreateVectorOfStructs(launches), flags).Union();
  // A round trip: the driver's refusals (a stream of the wrong kind, two entries on one device, grids that differ)
  // come back from the call itself, as natively.
  return client->Call(builder, wire::Call::LaunchCooperativeMultiDevice, call, payload, nullptr);
}
