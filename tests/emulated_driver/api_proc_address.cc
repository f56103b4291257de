// cuGetProcAddress: maps a base symbol name and the caller's CUDA version to
// the ABI-compatible exported function, as the driver does for cudart and
// for code using the driver entry point API.
#include <cstring>

#include "api_variants.h"
#include "driver.h"

namespace curelay::emulated {
namespace {

struct ProcEntry {
  const char* name;
  int version;     // CUDA version that introduced this ABI version of `name`
  void* legacy;    // legacy-stream (or stream-less) function
  void* per_thread;  // per-thread-default-stream function, if it differs
};

template <typename F>
void* Fn(F* f) {
  return reinterpret_cast<void*>(f);
}

const ProcEntry kProcs[] = {
    {"cuInit", 2000, Fn(&cuInit), nullptr},
    {"cuDriverGetVersion", 2020, Fn(&cuDriverGetVersion), nullptr},
    {"cuGetErrorName", 6000, Fn(&cuGetErrorName), nullptr},
    {"cuGetErrorString", 6000, Fn(&cuGetErrorString), nullptr},
    {"cuGetProcAddress", 11030, Fn(&cuGetProcAddress_v1), nullptr},
    {"cuGetProcAddress", 12000, Fn(&cuGetProcAddress_v2), nullptr},
    {"cuDeviceGet", 2000, Fn(&cuDeviceGet), nullptr},
    {"cuDeviceGetCount", 2000, Fn(&cuDeviceGetCount), nullptr},
    {"cuDeviceGetName", 2000, Fn(&cuDeviceGetName), nullptr},
    {"cuDeviceGetUuid", 9020, Fn(&cuDeviceGetUuid_v1), nullptr},
    {"cuDeviceGetUuid", 11040, Fn(&cuDeviceGetUuid_v2), nullptr},
    {"cuDeviceTotalMem", 3020, Fn(&cuDeviceTotalMem_v2), nullptr},
    {"cuDeviceGetAttribute", 2000, Fn(&cuDeviceGetAttribute), nullptr},
    {"cuDeviceGetProperties", 2000, Fn(&cuDeviceGetProperties), nullptr},
    {"cuDeviceComputeCapability", 2000, Fn(&cuDeviceComputeCapability), nullptr},
    {"cuDevicePrimaryCtxRetain", 7000, Fn(&cuDevicePrimaryCtxRetain), nullptr},
    {"cuDevicePrimaryCtxRelease", 11000, Fn(&cuDevicePrimaryCtxRelease_v2), nullptr},
    {"cuDevicePrimaryCtxSetFlags", 11000, Fn(&cuDevicePrimaryCtxSetFlags_v2), nullptr},
    {"cuDevicePrimaryCtxGetState", 7000, Fn(&cuDevicePrimaryCtxGetState), nullptr},
    {"cuDevicePrimaryCtxReset", 11000, Fn(&cuDevicePrimaryCtxReset_v2), nullptr},
    {"cuCtxCreate", 3020, Fn(&cuCtxCreate_v2), nullptr},
    {"cuCtxCreate", 11040, Fn(&cuCtxCreate_v3), nullptr},
    {"cuCtxCreate", 12050, Fn(&cuCtxCreate_v4), nullptr},
    {"cuCtxDestroy", 4000, Fn(&cuCtxDestroy_v2), nullptr},
    {"cuCtxPushCurrent", 4000, Fn(&cuCtxPushCurrent_v2), nullptr},
    {"cuCtxPopCurrent", 4000, Fn(&cuCtxPopCurrent_v2), nullptr},
    {"cuCtxSetCurrent", 4000, Fn(&cuCtxSetCurrent), nullptr},
    {"cuCtxGetCurrent", 4000, Fn(&cuCtxGetCurrent), nullptr},
    {"cuCtxGetDevice", 2000, Fn(&cuCtxGetDevice), nullptr},
    {"cuCtxGetFlags", 7000, Fn(&cuCtxGetFlags), nullptr},
    {"cuCtxSynchronize", 2000, Fn(&cuCtxSynchronize), nullptr},
    {"cuCtxGetApiVersion", 3020, Fn(&cuCtxGetApiVersion), nullptr},
    {"cuCtxGetStreamPriorityRange", 5050, Fn(&cuCtxGetStreamPriorityRange), nullptr},
    {"cuMemAlloc", 3020, Fn(&cuMemAlloc_v2), nullptr},
    {"cuMemFree", 3020, Fn(&cuMemFree_v2), nullptr},
    {"cuMemGetInfo", 3020, Fn(&cuMemGetInfo_v2), nullptr},
    {"cuMemGetAddressRange", 3020, Fn(&cuMemGetAddressRange_v2), nullptr},
    {"cuMemHostRegister", 6050, Fn(&cuMemHostRegister_v2), nullptr},
    {"cuMemHostUnregister", 4000, Fn(&cuMemHostUnregister), nullptr},
    {"cuMemcpyHtoD", 3020, Fn(&cuMemcpyHtoD_v2), Fn(&cuMemcpyHtoD_v2_ptds)},
    {"cuMemcpyDtoH", 3020, Fn(&cuMemcpyDtoH_v2), Fn(&cuMemcpyDtoH_v2_ptds)},
    {"cuMemcpyDtoD", 3020, Fn(&cuMemcpyDtoD_v2), Fn(&cuMemcpyDtoD_v2_ptds)},
    {"cuMemcpyHtoDAsync", 3020, Fn(&cuMemcpyHtoDAsync_v2), Fn(&cuMemcpyHtoDAsync_v2_ptsz)},
    {"cuMemcpyDtoHAsync", 3020, Fn(&cuMemcpyDtoHAsync_v2), Fn(&cuMemcpyDtoHAsync_v2_ptsz)},
    {"cuMemcpyDtoDAsync", 3020, Fn(&cuMemcpyDtoDAsync_v2), Fn(&cuMemcpyDtoDAsync_v2_ptsz)},
    {"cuMemsetD8", 3020, Fn(&cuMemsetD8_v2), Fn(&cuMemsetD8_v2_ptds)},
    {"cuMemsetD16", 3020, Fn(&cuMemsetD16_v2), Fn(&cuMemsetD16_v2_ptds)},
    {"cuMemsetD32", 3020, Fn(&cuMemsetD32_v2), Fn(&cuMemsetD32_v2_ptds)},
    {"cuMemsetD8Async", 3020, Fn(&cuMemsetD8Async), Fn(&cuMemsetD8Async_ptsz)},
    {"cuMemsetD16Async", 3020, Fn(&cuMemsetD16Async), Fn(&cuMemsetD16Async_ptsz)},
    {"cuMemsetD32Async", 3020, Fn(&cuMemsetD32Async), Fn(&cuMemsetD32Async_ptsz)},
    {"cuModuleLoadData", 2000, Fn(&cuModuleLoadData), nullptr},
    {"cuModuleLoadDataEx", 2010, Fn(&cuModuleLoadDataEx), nullptr},
    {"cuModuleUnload", 2000, Fn(&cuModuleUnload), nullptr},
    {"cuModuleGetFunction", 2000, Fn(&cuModuleGetFunction), nullptr},
    {"cuModuleGetGlobal", 3020, Fn(&cuModuleGetGlobal_v2), nullptr},
    {"cuFuncGetAttribute", 2020, Fn(&cuFuncGetAttribute), nullptr},
    {"cuFuncSetAttribute", 9000, Fn(&cuFuncSetAttribute), nullptr},
    {"cuFuncGetName", 12030, Fn(&cuFuncGetName), nullptr},
    {"cuModuleGetFunctionCount", 12040, Fn(&cuModuleGetFunctionCount), nullptr},
    {"cuModuleEnumerateFunctions", 12040, Fn(&cuModuleEnumerateFunctions), nullptr},
    {"cuLaunchHostFunc", 10000, Fn(&cuLaunchHostFunc), nullptr},
    {"cuCtxSetFlags", 12010, Fn(&cuCtxSetFlags), nullptr},
    {"cuMemPoolCreate", 11020, Fn(&cuMemPoolCreate), nullptr},
    {"cuMemPoolDestroy", 11020, Fn(&cuMemPoolDestroy), nullptr},
    {"cuMemAllocFromPoolAsync", 11020, Fn(&cuMemAllocFromPoolAsync), nullptr},
    {"cuDeviceSetMemPool", 11020, Fn(&cuDeviceSetMemPool), nullptr},
    {"cuDeviceGetMemPool", 11020, Fn(&cuDeviceGetMemPool), nullptr},
    {"cuOccupancyMaxPotentialBlockSizeWithFlags", 7000, Fn(&cuOccupancyMaxPotentialBlockSizeWithFlags), nullptr},
    {"cuCtxGetCacheConfig", 3020, Fn(&cuCtxGetCacheConfig), nullptr},
    {"cuCtxSetCacheConfig", 3020, Fn(&cuCtxSetCacheConfig), nullptr},
    {"cuFuncGetParamInfo", 12040, Fn(&cuFuncGetParamInfo), nullptr},
    {"cuLaunchKernel", 4000, Fn(&cuLaunchKernel), Fn(&cuLaunchKernel_ptsz)},
    {"cuStreamCreate", 2000, Fn(&cuStreamCreate), nullptr},
    {"cuStreamCreateWithPriority", 5050, Fn(&cuStreamCreateWithPriority), nullptr},
    {"cuStreamGetPriority", 5050, Fn(&cuStreamGetPriority), Fn(&cuStreamGetPriority_ptsz)},
    {"cuStreamGetFlags", 5050, Fn(&cuStreamGetFlags), Fn(&cuStreamGetFlags_ptsz)},
    {"cuStreamGetCtx", 9020, Fn(&cuStreamGetCtx), Fn(&cuStreamGetCtx_ptsz)},
    {"cuStreamDestroy", 4000, Fn(&cuStreamDestroy_v2), nullptr},
    {"cuStreamSynchronize", 2000, Fn(&cuStreamSynchronize), Fn(&cuStreamSynchronize_ptsz)},
    {"cuStreamQuery", 2000, Fn(&cuStreamQuery), Fn(&cuStreamQuery_ptsz)},
    {"cuStreamWaitEvent", 3020, Fn(&cuStreamWaitEvent), Fn(&cuStreamWaitEvent_ptsz)},
    {"cuEventCreate", 2000, Fn(&cuEventCreate), nullptr},
    {"cuEventRecord", 2000, Fn(&cuEventRecord), Fn(&cuEventRecord_ptsz)},
    {"cuEventQuery", 2000, Fn(&cuEventQuery), nullptr},
    {"cuEventSynchronize", 2000, Fn(&cuEventSynchronize), nullptr},
    {"cuEventElapsedTime", 2000, Fn(&cuEventElapsedTime_v1), nullptr},
    {"cuEventElapsedTime", 12080, Fn(&cuEventElapsedTime_v2), nullptr},
    {"cuEventDestroy", 4000, Fn(&cuEventDestroy_v2), nullptr},
    // Green contexts: the versions of cudaTypedefs.h's PFN_* typedefs.
    {"cuDeviceGetDevResource", 12040, Fn(&cuDeviceGetDevResource), nullptr},
    {"cuCtxGetDevResource", 12040, Fn(&cuCtxGetDevResource), nullptr},
    {"cuGreenCtxGetDevResource", 12040, Fn(&cuGreenCtxGetDevResource), nullptr},
    {"cuDevSmResourceSplitByCount", 12040, Fn(&cuDevSmResourceSplitByCount), nullptr},
    {"cuDevResourceGenerateDesc", 12040, Fn(&cuDevResourceGenerateDesc), nullptr},
    {"cuGreenCtxCreate", 12040, Fn(&cuGreenCtxCreate), nullptr},
    {"cuGreenCtxDestroy", 12040, Fn(&cuGreenCtxDestroy), nullptr},
    {"cuCtxFromGreenCtx", 12040, Fn(&cuCtxFromGreenCtx), nullptr},
    {"cuGreenCtxRecordEvent", 12040, Fn(&cuGreenCtxRecordEvent), nullptr},
    {"cuGreenCtxWaitEvent", 12040, Fn(&cuGreenCtxWaitEvent), nullptr},
    {"cuStreamGetGreenCtx", 12040, Fn(&cuStreamGetGreenCtx), nullptr},
    {"cuGreenCtxStreamCreate", 12050, Fn(&cuGreenCtxStreamCreate), nullptr},
    {"cuGreenCtxGetId", 12090, Fn(&cuGreenCtxGetId), nullptr},
};

CUresult Lookup(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr || cuda_version <= 0 ||
      cuda_version > kDriverVersion) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (flags != CU_GET_PROC_ADDRESS_DEFAULT && flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM &&
      flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const ProcEntry* best = nullptr;
  bool name_known = false;
  for (const ProcEntry& e : kProcs) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    name_known = true;
    if (e.version <= cuda_version && (best == nullptr || e.version > best->version)) best = &e;
  }
  *pfn = nullptr;
  CUdriverProcAddressQueryResult result = CU_GET_PROC_ADDRESS_SUCCESS;
  if (best == nullptr) {
    result = name_known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  } else {
    // The default mode means the legacy stream for a caller built without
    // per-thread default streams, which is all the driver can know.
    const bool per_thread = flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    *pfn = per_thread && best->per_thread != nullptr ? best->per_thread : best->legacy;
  }
  if (status != nullptr) *status = result;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
  return curelay::emulated::Lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

// The CUDA 11.3 version reports a missing symbol as an error instead.
CUresult CUDAAPI cuGetProcAddress_v1(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags) {
  CUdriverProcAddressQueryResult status;
  const CUresult r = curelay::emulated::Lookup(symbol, pfn, cudaVersion, flags, &status);
  if (r != CUDA_SUCCESS) return r;
  return status == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
