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
}
