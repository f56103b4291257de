// cuGetProcAddress: how the CUDA runtime finds every other entry point. It must hand out the shim's own
// functions (cuGetProcAddress included), resolved by API name the way the driver does.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <string_view>

#include "driver_table.h"
#include "frontend/api/api_support.h"
#include "frontend/client/log.h"

using namespace curelay::frontend;

namespace {

// Which ABI variant a cudaVersion gets (generated from cudaTypedefs.h by codegen/gen_proc_versions.py).
struct ProcVersion {
  std::string_view api;
  int min_version;
  const char* abi;
  const char* per_thread_abi;
  int per_thread_min_version;
};

constexpr ProcVersion kProcVersions[] = {
#define CURELAY_PROC_VERSION(api, min_version, abi, per_thread_abi, per_thread_min) \
  {api, min_version, abi, per_thread_abi, per_thread_min},
#include "proc_versions.inc"
#undef CURELAY_PROC_VERSION
};

CUresult Resolve(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<cuuint64_t>(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const std::string_view name(symbol);
  const auto [first, last] = std::equal_range(
      std::begin(kProcVersions), std::end(kProcVersions), ProcVersion{name, 0, nullptr, nullptr, 0},
      [](const ProcVersion& a, const ProcVersion& b) { return a.api < b.api; });
  if (first == last) {
    *pfn = ResolveProcAddress(name, per_thread);  // no versioned variants: the name as cuda.h maps it
  } else {
    // The newest variant introduced at or before the caller's version, as the driver chooses.
    const ProcVersion* chosen = nullptr;
    for (auto entry = first; entry != last && entry->min_version <= cuda_version; ++entry) chosen = &*entry;
    if (chosen == nullptr) {
      Log().debug("cuGetProcAddress({}, version {}): version not sufficient", symbol, cuda_version);
      *pfn = nullptr;
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    }
    const bool use_per_thread = per_thread && chosen->per_thread_abi != nullptr &&
                                cuda_version >= chosen->per_thread_min_version;
    *pfn = FindDriverSymbol(use_per_thread ? chosen->per_thread_abi : chosen->abi);
  }
  if (*pfn == nullptr) {
    Log().debug("cuGetProcAddress({}, version {}): not found", symbol, cuda_version);
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
