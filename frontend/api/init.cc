// cuInit and the driver version: the only entry points that work before a session exists.
#include "common/shim_identity.h"
#include "frontend/api/api_support.h"

using namespace curelay::frontend;

// Keeps the identity marker in the shim's read-only data (the executor looks for it to refuse loading the shim).
extern "C" __attribute__((used)) const char* const curelay_shim_identity_marker = curelay::kShimIdentity;

extern "C" CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Client::Initialize();
}

extern "C" CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The API version curelay implements, answered without a session: libraries pick entry points by it, so it
  // must describe the shim, not whichever driver a backend happens to run.
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}
