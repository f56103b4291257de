// Kernel launches: arguments are packed here by the function's parameter layout and the launch is posted; the
// application does not wait for it, exactly as with the real driver.
#include <algorithm>
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

namespace {

// Makes every stream of `streams` wait for the work each of the others holds now (an event recorded in each, in
// that stream's own context), as the multi-device launch's pre- and post-launch synchronization do.
CUresult JoinStreams(const std::vector<CUstream>& streams) {
  std::vector<CUevent> events;
  CUresult result = CUDA_SUCCESS;
  for (CUstream stream : streams) {
    CUcontext context = nullptr;
    if ((result = cuStreamGetCtx(stream, &context)) != CUDA_SUCCESS) break;
    if ((result = cuCtxPushCurrent(context)) != CUDA_SUCCESS) break;
    CUevent event = nullptr;
    result = cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
    if (result == CUDA_SUCCESS) {
      events.push_back(event);
      result = cuEventRecord(event, stream);
    }
    CUcontext popped = nullptr;
    cuCtxPopCurrent(&popped);
    if (result != CUDA_SUCCESS) break;
  }
  for (size_t waiter = 0; result == CUDA_SUCCESS && waiter < streams.size(); ++waiter) {
    for (size_t other = 0; result == CUDA_SUCCESS && other < events.size(); ++other) {
      if (other != waiter) result = cuStreamWaitEvent(streams[waiter], events[other], 0);
    }
  }
  for (CUevent event : events) cuEventDestroy(event);  // the waits keep what they need, as natively
  return result;
}

}  // namespace

// The deprecated multi-device form: one cooperative launch per entry, each on a stream of its own device, checked as
// cuda.h asks (created streams only, one entry per device, the same grid, block and shared memory everywhere). The
// default synchronization across the streams (before the kernels and after them) is made of events; with one entry
// stream order alone gives it. As cuLaunchKernel here, it leaves the functions' legacy launch state (block shape,
// parameters) as it was, where the driver overwrites it.
extern "C" CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* list, unsigned int count,
                                                         unsigned int flags) {
  constexpr unsigned int kKnownFlags = CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                                       CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC;
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (list == nullptr || count == 0 || (flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUstream> streams;
  std::vector<CUdevice> devices;
  for (unsigned int i = 0; i < count; ++i) {
    const CUDA_LAUNCH_PARAMS& entry = list[i];
    const CUDA_LAUNCH_PARAMS& first = list[0];
    if (entry.hStream == nullptr || entry.hStream == CU_STREAM_LEGACY || entry.hStream == CU_STREAM_PER_THREAD) {
      return CUDA_ERROR_INVALID_HANDLE;  // what the driver answers for the NULL stream (measured on the H200)
    }
    if (entry.gridDimX != first.gridDimX || entry.gridDimY != first.gridDimY || entry.gridDimZ != first.gridDimZ ||
        entry.blockDimX != first.blockDimX || entry.blockDimY != first.blockDimY ||
        entry.blockDimZ != first.blockDimZ || entry.sharedMemBytes != first.sharedMemBytes) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    CUcontext context = nullptr;
    CURELAY_RETURN_IF_ERROR(cuStreamGetCtx(entry.hStream, &context));
    if (std::find(devices.begin(), devices.end(), context->device) != devices.end()) return CUDA_ERROR_INVALID_VALUE;
    devices.push_back(context->device);
    streams.push_back(entry.hStream);
  }
  if (count > 1 && (flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC) == 0) {
    CURELAY_RETURN_IF_ERROR(JoinStreams(streams));
  }
  for (unsigned int i = 0; i < count; ++i) {
    const CUDA_LAUNCH_PARAMS& entry = list[i];
    CURELAY_RETURN_IF_ERROR(cuLaunchCooperativeKernel(entry.function, entry.gridDimX, entry.gridDimY,
                                                      entry.gridDimZ, entry.blockDimX, entry.blockDimY,
                                                      entry.blockDimZ, entry.sharedMemBytes, entry.hStream,
                                                      entry.kernelParams));
  }
  if (count > 1 && (flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC) == 0) {
    CURELAY_RETURN_IF_ERROR(JoinStreams(streams));
  }
  return CUDA_SUCCESS;
}
