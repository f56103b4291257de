// cuGetErrorName / cuGetErrorString for every CUresult in cuda.h 13.0.
// Both work before cuInit; unknown codes give CUDA_ERROR_INVALID_VALUE and a
// NULL string, as the driver does.
#include <cstddef>

#include "cuda_api.h"

namespace curelay::emulated {
namespace {

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

#define CURELAY_ERROR(code, text) {code, #code, text}

constexpr ErrorText kErrors[] = {
    CURELAY_ERROR(CUDA_SUCCESS, "no error"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    CURELAY_ERROR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    CURELAY_ERROR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    CURELAY_ERROR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    CURELAY_ERROR(CUDA_ERROR_PROFILER_DISABLED,
                  "profiler disabled while using external profiling tool"),
    CURELAY_ERROR(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized"),
    CURELAY_ERROR(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
    CURELAY_ERROR(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
    CURELAY_ERROR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    CURELAY_ERROR(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER,
                  "API call is not supported in the installed CUDA driver"),
    CURELAY_ERROR(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    CURELAY_ERROR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    CURELAY_ERROR(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    CURELAY_ERROR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    CURELAY_ERROR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    CURELAY_ERROR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    CURELAY_ERROR(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
    CURELAY_ERROR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    CURELAY_ERROR(CUDA_ERROR_NO_BINARY_FOR_GPU,
                  "no kernel image is available for execution on the device"),
    CURELAY_ERROR(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
    CURELAY_ERROR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    CURELAY_ERROR(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
    CURELAY_ERROR(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
    CURELAY_ERROR(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
    CURELAY_ERROR(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
    CURELAY_ERROR(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"),
    CURELAY_ERROR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid OpenGL or DirectX context"),
    CURELAY_ERROR(CUDA_ERROR_NVLINK_UNCORRECTABLE, "uncorrectable NVLink error detected during the execution"),
    CURELAY_ERROR(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
    CURELAY_ERROR(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain."),
    CURELAY_ERROR(CUDA_ERROR_JIT_COMPILATION_DISABLED, "PTX JIT compilation was disabled"),
    CURELAY_ERROR(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "the provided execution affinity is not supported"),
    CURELAY_ERROR(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,
                  "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    CURELAY_ERROR(CUDA_ERROR_CONTAINED, "an exception occurred on the device that was contained"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    CURELAY_ERROR(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    CURELAY_ERROR(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
    CURELAY_ERROR(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
    CURELAY_ERROR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    CURELAY_ERROR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    CURELAY_ERROR(CUDA_ERROR_LOSSY_QUERY, "attempted introspection would be semantically lossy"),
    CURELAY_ERROR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    CURELAY_ERROR(CUDA_ERROR_NOT_READY, "device not ready"),
    CURELAY_ERROR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    CURELAY_ERROR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    CURELAY_ERROR(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    CURELAY_ERROR(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch uses incompatible texturing mode"),
    CURELAY_ERROR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
    CURELAY_ERROR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
    CURELAY_ERROR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
    CURELAY_ERROR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    CURELAY_ERROR(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    CURELAY_ERROR(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
    CURELAY_ERROR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                  "part or all of the requested memory range is already mapped"),
    CURELAY_ERROR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
    CURELAY_ERROR(CUDA_ERROR_HARDWARE_STACK_ERROR, "an illegal memory access was encountered: hardware stack error"),
    CURELAY_ERROR(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
    CURELAY_ERROR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_PC, "invalid program counter"),
    CURELAY_ERROR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    CURELAY_ERROR(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
    CURELAY_ERROR(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed"),
    CURELAY_ERROR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    CURELAY_ERROR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    CURELAY_ERROR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    CURELAY_ERROR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
    CURELAY_ERROR(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
                  "forward compatibility was attempted on non supported HW"),
    CURELAY_ERROR(CUDA_ERROR_MPS_CONNECTION_FAILED, "MPS client failed to connect to the MPS control daemon or the MPS server"),
    CURELAY_ERROR(CUDA_ERROR_MPS_RPC_FAILURE, "the remote procedural call between the MPS server and the MPS client failed"),
    CURELAY_ERROR(CUDA_ERROR_MPS_SERVER_NOT_READY, "MPS server is not ready to accept new MPS client requests"),
    CURELAY_ERROR(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "the hardware resources required to create MPS client have been exhausted"),
    CURELAY_ERROR(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "the hardware resources required to support device connections have been exhausted"),
    CURELAY_ERROR(CUDA_ERROR_MPS_CLIENT_TERMINATED, "the MPS client has been terminated by the server"),
    CURELAY_ERROR(CUDA_ERROR_CDP_NOT_SUPPORTED, "the module is using CUDA Dynamic Parallelism, but the current configuration does not support it"),
    CURELAY_ERROR(CUDA_ERROR_CDP_VERSION_MISMATCH, "a CUDA Dynamic Parallelism module was built with an incompatible version"),
    CURELAY_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    CURELAY_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    CURELAY_ERROR(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences"),
    CURELAY_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
    CURELAY_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
    CURELAY_ERROR(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream"),
    CURELAY_ERROR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream"),
    CURELAY_ERROR(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
    CURELAY_ERROR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
    CURELAY_ERROR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    CURELAY_ERROR(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    CURELAY_ERROR(CUDA_ERROR_EXTERNAL_DEVICE, "an async error has occured in external entity outside of CUDA"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_CLUSTER_SIZE, "a kernel launch error has occurred due to cluster misconfiguration"),
    CURELAY_ERROR(CUDA_ERROR_FUNCTION_NOT_LOADED, "the function handle is not loaded when calling an API that requires a loaded function"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_RESOURCE_TYPE, "one or more resources passed in are not valid resource types for the operation"),
    CURELAY_ERROR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "one or more resources are insufficient or non-applicable for the operation"),
    CURELAY_ERROR(CUDA_ERROR_KEY_ROTATION, "an error occurred during key rotation"),
    CURELAY_ERROR(CUDA_ERROR_UNKNOWN, "unknown error"),
};

#undef CURELAY_ERROR

const ErrorText* Find(CUresult code) {
  for (const ErrorText& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* e = curelay::emulated::Find(error);
  *pStr = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* e = curelay::emulated::Find(error);
  *pStr = e != nullptr ? e->text : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"
