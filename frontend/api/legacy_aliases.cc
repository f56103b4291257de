// Older ABI symbols whose contract is identical to their current version: each forwards to it. (Legacy names
// whose signatures differ, like the 32-bit-size cuMemAlloc, stay unsupported.)
#include "frontend/api/api_support.h"

#define CURELAY_LEGACY_ALIAS(legacy, current, params, args) \
  CUresult legacy##_legacy params __asm__(#legacy);         \
  CUresult legacy##_legacy params { return current args; }

extern "C" {
CURELAY_LEGACY_ALIAS(cuCtxDestroy, cuCtxDestroy_v2, (CUcontext c), (c))
CURELAY_LEGACY_ALIAS(cuCtxPushCurrent, cuCtxPushCurrent_v2, (CUcontext c), (c))
CURELAY_LEGACY_ALIAS(cuCtxPopCurrent, cuCtxPopCurrent_v2, (CUcontext * c), (c))
CURELAY_LEGACY_ALIAS(cuStreamDestroy, cuStreamDestroy_v2, (CUstream s), (s))
CURELAY_LEGACY_ALIAS(cuEventDestroy, cuEventDestroy_v2, (CUevent e), (e))
CURELAY_LEGACY_ALIAS(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, (CUdevice d), (d))
CURELAY_LEGACY_ALIAS(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2, (CUdevice d, unsigned f), (d, f))
CURELAY_LEGACY_ALIAS(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, (CUdevice d), (d))
CURELAY_LEGACY_ALIAS(cuLinkCreate, cuLinkCreate_v2, (unsigned n, CUjit_option* o, void** v, CUlinkState* s),
                     (n, o, v, s))
CURELAY_LEGACY_ALIAS(cuLinkAddData, cuLinkAddData_v2,
                     (CUlinkState s, CUjitInputType t, void* d, size_t b, const char* name, unsigned n,
                      CUjit_option* o, void** v),
                     (s, t, d, b, name, n, o, v))
CURELAY_LEGACY_ALIAS(cuLinkAddFile, cuLinkAddFile_v2,
                     (CUlinkState s, CUjitInputType t, const char* path, unsigned n, CUjit_option* o, void** v),
                     (s, t, path, n, o, v))
}
