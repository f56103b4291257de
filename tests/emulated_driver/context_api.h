// Context creation shared by cuCtxCreate_v4 and the legacy cuCtxCreate_v2.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_CONTEXT_API_H_
#define CURELAY_TESTS_EMULATED_DRIVER_CONTEXT_API_H_

#include "cuda_api.h"

namespace curelay::emulated {

// Creates a context and pushes it on the calling thread's stack.
CUresult CreateContext(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                       CUdevice dev);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_CONTEXT_API_H_
