// The CUDA 12+ launch and occupancy entry points the runtime uses, context limits and the module loading mode,
// for the emulated device: enough behaviour to test that curelay forwards them faithfully.
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "api_common.h"
#include "device_properties.h"
#include "module_api.h"

namespace emu = curelay::emulated;

namespace {

std::mutex limits_mutex;
std::map<int, size_t> limits = {{CU_LIMIT_STACK_SIZE, 1024},
                                {CU_LIMIT_PRINTF_FIFO_SIZE, 1 << 20},
                                {CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20}};

}  // namespace

extern "C" {

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  if (config == nullptr || (config->numAttrs != 0 && config->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& attribute = config->attrs[i];
    switch (attribute.id) {
      case CU_LAUNCH_ATTRIBUTE_IGNORE:
      case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: {
        const auto& dim = attribute.value.clusterDim;
        if (dim.x * dim.y * dim.z != 1) return CUDA_ERROR_NOT_SUPPORTED;  // the emulated device has no clusters
        break;
      }
      default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  return cuLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                        config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream, kernelParams,
                        extra);
}

// The deprecated multi-device cooperative launch, with the checks cuda.h names and the answers the H200 gave (the
// NULL stream CUDA_ERROR_INVALID_HANDLE, an unknown flag, no entries or two entries on one device
// CUDA_ERROR_INVALID_VALUE): each entry launched on its stream, in that stream's context. The joins of the streams
// before and after need nothing here, where one queue runs all work in order.
CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList, unsigned int numDevices,
                                                      unsigned int flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    constexpr unsigned kKnownFlags = CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                                     CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC;
    if (launchParamsList == nullptr || numDevices == 0 || (flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
    std::vector<int> devices;
    const CUDA_LAUNCH_PARAMS& first = launchParamsList[0];
    for (unsigned i = 0; i < numDevices; ++i) {
      const CUDA_LAUNCH_PARAMS& entry = launchParamsList[i];
      if (entry.hStream == nullptr || entry.hStream == CU_STREAM_LEGACY || entry.hStream == CU_STREAM_PER_THREAD) {
        return CUDA_ERROR_INVALID_HANDLE;
      }
      std::shared_ptr<emu::Context> ctx;
      std::shared_ptr<emu::Stream> stream;
      if (CUresult r = emu::ResolveStream(entry.hStream, &ctx, &stream); r != CUDA_SUCCESS) return r;
      if (std::find(devices.begin(), devices.end(), ctx->device) != devices.end()) return CUDA_ERROR_INVALID_VALUE;
      devices.push_back(ctx->device);
      if (entry.gridDimX != first.gridDimX || entry.gridDimY != first.gridDimY || entry.gridDimZ != first.gridDimZ ||
          entry.blockDimX != first.blockDimX || entry.blockDimY != first.blockDimY ||
          entry.blockDimZ != first.blockDimZ || entry.sharedMemBytes != first.sharedMemBytes) {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    for (unsigned i = 0; i < numDevices; ++i) {
      const CUDA_LAUNCH_PARAMS& entry = launchParamsList[i];
      if (CUresult r = cuLaunchKernel(entry.function, entry.gridDimX, entry.gridDimY, entry.gridDimZ, entry.blockDimX,
                                      entry.blockDimY, entry.blockDimZ, entry.sharedMemBytes, entry.hStream,
                                      entry.kernelParams, nullptr);
          r != CUDA_SUCCESS) {
        return r;
      }
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                                      int blockSize, size_t dynamicSMemSize,
                                                                      unsigned int flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Function> f;
    if (CUresult r = emu::LookupFunction(func, &f); r != CUDA_SUCCESS) return r;
    if (numBlocks == nullptr || blockSize <= 0 || flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    // 2048 resident threads per multiprocessor in whole warps, at most 32 blocks, and the shared memory limit.
    const int warps = (blockSize + 31) / 32;
    int blocks = std::min(32, 64 / warps);
    const size_t shared = dynamicSMemSize + f->info->static_shared_bytes;
    if (shared > static_cast<size_t>(emu::kDefaultMaxSharedPerBlock)) blocks = 0;
    *numBlocks = blocks;
    return CUDA_SUCCESS;
  });
}

// The block size (a whole number of warps, up to the limit) with the most resident warps per multiprocessor by the
// rule above, the larger one on a tie; the grid that fills the device with it.
CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int* minGridSize, int* blockSize, CUfunction func,
                                                           CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                           size_t dynamicSMemSize, int blockSizeLimit,
                                                           unsigned int flags) {
  if (minGridSize == nullptr || blockSize == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdevice device = 0;
  int sms = 0;
  if (CUresult r = cuCtxGetDevice(&device); r != CUDA_SUCCESS) return r;
  if (CUresult r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device); r != CUDA_SUCCESS) {
    return r;
  }
  const int limit = blockSizeLimit > 0 ? std::min(blockSizeLimit, 1024) : 1024;
  int best_block = 0, best_blocks = 0, best_warps = 0;
  for (int threads = 32; threads <= limit; threads += 32) {
    const size_t smem = blockSizeToDynamicSMemSize != nullptr ? blockSizeToDynamicSMemSize(threads) : dynamicSMemSize;
    int blocks = 0;
    if (CUresult r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, func, threads, smem, flags);
        r != CUDA_SUCCESS) {
      return r;
    }
    if (blocks * (threads / 32) >= best_warps && blocks > 0) {
      best_warps = blocks * (threads / 32);
      best_block = threads;
      best_blocks = blocks;
    }
  }
  *blockSize = best_block;
  *minGridSize = best_blocks * sms;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  if (pvalue == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(limits_mutex);
  auto found = limits.find(limit);
  if (found == limits.end()) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  *pvalue = found->second;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  std::lock_guard<std::mutex> lock(limits_mutex);
  auto found = limits.find(limit);
  if (found == limits.end()) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  found->second = value;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = emu::ModuleLoadingMode();
  return CUDA_SUCCESS;
}

// Deprecated: shared memory banks are not configurable on this generation, so a valid setting changes nothing.
CUresult CUDAAPI cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    std::shared_ptr<emu::Function> function;
    if (CUresult r = emu::LookupFunction(hfunc, &function); r != CUDA_SUCCESS) return r;
    if (config < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
