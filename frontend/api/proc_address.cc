// cuGetProcAddress: how the CUDA runtime finds every other entry point. It must hand out the shim's own
// functions (cuGetProcAddress included), resolved by API name the way the driver does.
#include <cstring>
#include <string_view>

#include "driver_table.h"
#include "frontend/api/api_support.h"

using namespace curelay::frontend;

namespace {

CUresult Resolve(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<cuuint64_t>(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  // Version-aware selection among _v2/_v3 variants arrives with the full surface (issue 3); until then the
  // newest variant cuda.h 13.0 maps the name to is returned, which is what every 12.x/13.x caller asks for.
  (void)cuda_version;
  *pfn = ResolveProcAddress(symbol, per_thread);
  if (*pfn == nullptr) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  return Resolve(symbol, pfn, cuda_version, flags, status);
}

CUresult cuGetProcAddress_v1(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags)
    __asm__("cuGetProcAddress");
CUresult cuGetProcAddress_v1(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  return Resolve(symbol, pfn, cuda_version, flags, nullptr);
}

}  // extern "C"
