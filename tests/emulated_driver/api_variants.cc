// Legacy and per-thread-default-stream entry points.
//
// The emulated device executes all work of a device in one submission
// order, which is at least as strong as both the legacy and the per-thread
// default stream semantics, so the _ptds/_ptsz variants differ from the
// plain ones only in how a null stream is named.
#include "api_variants.h"

#include "api_common.h"
#include "context_api.h"

namespace {

CUstream PerThread(CUstream s) { return s == nullptr ? CU_STREAM_PER_THREAD : s; }

}  // namespace

extern "C" {

CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return curelay::emulated::Guard([&] { return curelay::emulated::CreateContext(pctx, nullptr, flags, dev); });
}

// cuCtxCreate_v4 with only execution-affinity parameters: a non-empty list answers
// CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY (as the H200 with driver 580 does outside MPS); none makes an ordinary
// context.
CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                unsigned int flags, CUdevice dev) {
  return curelay::emulated::Guard([&] {
    CUctxCreateParams params{paramsArray, numParams, nullptr};
    return curelay::emulated::CreateContext(pctx, &params, flags, dev);
  });
}

CUresult CUDAAPI cuEventElapsedTime_v1(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

CUresult CUDAAPI cuDeviceGetUuid_v1(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost,
                                      size_t ByteCount) {
  return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount) {
  return cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return cuMemsetD8_v2(dstDevice, uc, N);
}

CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  return cuMemsetD16_v2(dstDevice, us, N);
}

CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return cuMemsetD32_v2(dstDevice, ui, N);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost,
                                           size_t ByteCount, CUstream hStream) {
  return cuMemcpyHtoDAsync_v2(dstDevice, srcHost, ByteCount, PerThread(hStream));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream) {
  return cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, PerThread(hStream));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream) {
  return cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, ByteCount, PerThread(hStream));
}

CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                      CUstream hStream) {
  return cuMemsetD8Async(dstDevice, uc, N, PerThread(hStream));
}

CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                       CUstream hStream) {
  return cuMemsetD16Async(dstDevice, us, N, PerThread(hStream));
}

CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                       CUstream hStream) {
  return cuMemsetD32Async(dstDevice, ui, N, PerThread(hStream));
}

CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream hStream, int* priority) {
  return cuStreamGetPriority(PerThread(hStream), priority);
}

CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags) {
  return cuStreamGetFlags(PerThread(hStream), flags);
}

CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx) {
  return cuStreamGetCtx(PerThread(hStream), pctx);
}

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return cuStreamWaitEvent(PerThread(hStream), hEvent, Flags);
}

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream) { return cuStreamQuery(PerThread(hStream)); }

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream) {
  return cuStreamSynchronize(PerThread(hStream));
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  return cuEventRecord(hEvent, PerThread(hStream));
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void** kernelParams, void** extra) {
  return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                        sharedMemBytes, PerThread(hStream), kernelParams, extra);
}

}  // extern "C"
