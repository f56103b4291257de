// Exported ABI names that cuda.h only declares for the driver's own build
// (__CUDA_API_VERSION_INTERNAL): legacy versions still exported by libcuda
// and the per-thread-default-stream (_ptds / _ptsz) variants.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_API_VARIANTS_H_
#define CURELAY_TESTS_EMULATED_DRIVER_API_VARIANTS_H_

#include "cuda_api.h"

#define CURELAY_EXPORT __attribute__((visibility("default")))

extern "C" {

// Legacy versions.
CURELAY_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
CURELAY_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray,
                                               int numParams, unsigned int flags, CUdevice dev);
CURELAY_EXPORT CUresult CUDAAPI cuEventElapsedTime_v1(float* pMilliseconds, CUevent hStart,
                                                      CUevent hEnd) __asm__("cuEventElapsedTime");
CURELAY_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v1(CUuuid* uuid, CUdevice dev)
    __asm__("cuDeviceGetUuid");
CURELAY_EXPORT CUresult CUDAAPI cuGetProcAddress_v1(const char* symbol, void** pfn,
                                                    int cudaVersion, cuuint64_t flags)
    __asm__("cuGetProcAddress");

// Per-thread default stream variants: a null stream means the calling
// thread's default stream.
CURELAY_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost,
                                                     size_t ByteCount);
CURELAY_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice,
                                                     size_t ByteCount);
CURELAY_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                     size_t ByteCount);
CURELAY_EXPORT CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc,
                                                   size_t N);
CURELAY_EXPORT CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us,
                                                    size_t N);
CURELAY_EXPORT CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui,
                                                    size_t N);
CURELAY_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice,
                                                          const void* srcHost, size_t ByteCount,
                                                          CUstream hStream);
CURELAY_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice,
                                                          size_t ByteCount, CUstream hStream);
CURELAY_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice,
                                                          CUdeviceptr srcDevice, size_t ByteCount,
                                                          CUstream hStream);
CURELAY_EXPORT CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc,
                                                     size_t N, CUstream hStream);
CURELAY_EXPORT CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us,
                                                      size_t N, CUstream hStream);
CURELAY_EXPORT CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui,
                                                      size_t N, CUstream hStream);
CURELAY_EXPORT CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream hStream, int* priority);
CURELAY_EXPORT CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags);
CURELAY_EXPORT CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx);
CURELAY_EXPORT CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent,
                                                       unsigned int Flags);
CURELAY_EXPORT CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
CURELAY_EXPORT CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
CURELAY_EXPORT CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CURELAY_EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                    unsigned int gridDimY, unsigned int gridDimZ,
                                                    unsigned int blockDimX, unsigned int blockDimY,
                                                    unsigned int blockDimZ,
                                                    unsigned int sharedMemBytes, CUstream hStream,
                                                    void** kernelParams, void** extra);
CURELAY_EXPORT CUresult CUDAAPI cuMemMapArrayAsync_ptsz(CUarrayMapInfo* mapInfoList, unsigned int count,
                                                        CUstream hStream);  // api_arrays.cc

}  // extern "C"

#endif  // CURELAY_TESTS_EMULATED_DRIVER_API_VARIANTS_H_
