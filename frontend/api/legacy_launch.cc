// The legacy execution control API (deprecated since CUDA 4.0, still exported): a function's block shape, dynamic
// shared memory and parameter buffer are set by separate calls and used by the next cuLaunch/cuLaunchGrid(Async).
// That state lives here, per function, and a launch is an ordinary cuLaunchKernel with the parameter buffer as
// CU_LAUNCH_PARAM_BUFFER_POINTER (raw bytes at the offsets the cuParamSet* calls wrote), so it takes the ordinary
// launch path. cuParamSetTexRef is with the texture references (texture_references.cc).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// CUDA's limit for a kernel's parameters (the buffer cuParamSetSize describes).
constexpr size_t kMaxParameterBytes = 32764;

struct LegacyLaunchState {
  unsigned int block[3] = {0, 0, 0};
  unsigned int shared_bytes = 0;
  size_t parameter_bytes = 0;          // cuParamSetSize
  std::vector<uint8_t> parameters;     // what cuParamSet* wrote, at their offsets
};

// By function: function objects are never destroyed (a module's handles stay valid names), so a key is never
// reused for another function.
std::mutex states_mutex;
std::unordered_map<CUfunction, LegacyLaunchState> states;  // guarded by states_mutex

CUresult RequireFunction(Client** client, CUfunction function) {
  CURELAY_RETURN_IF_ERROR(RequireContext(client));
  return function != nullptr && (*client)->functions.Contains(function) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

template <typename Change>
CUresult ChangeState(CUfunction function, Change change) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireFunction(&client, function));
  std::lock_guard<std::mutex> lock(states_mutex);
  return change(states[function]);
}

CUresult SetParameter(CUfunction function, int offset, const void* value, size_t bytes) {
  if (offset < 0 || value == nullptr || bytes > kMaxParameterBytes ||
      static_cast<size_t>(offset) > kMaxParameterBytes - bytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return ChangeState(function, [&](LegacyLaunchState& state) {
    const size_t end = static_cast<size_t>(offset) + bytes;
    if (state.parameters.size() < end) state.parameters.resize(end, 0);
    std::memcpy(state.parameters.data() + offset, value, bytes);
    return CUDA_SUCCESS;
  });
}

CUresult LaunchGrid(CUfunction function, int grid_width, int grid_height, CUstream stream) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireFunction(&client, function));
  if (grid_width <= 0 || grid_height <= 0) return CUDA_ERROR_INVALID_VALUE;
  LegacyLaunchState state;
  {
    std::lock_guard<std::mutex> lock(states_mutex);
    state = states[function];
  }
  // No block shape set: the launch has no blocks to run, which the driver refuses.
  if (state.block[0] == 0 || state.block[1] == 0 || state.block[2] == 0) return CUDA_ERROR_INVALID_VALUE;
  // The buffer the kernel gets is cuParamSetSize's bytes; bytes never written are zeros.
  state.parameters.resize(std::max<size_t>(state.parameter_bytes, 1), 0);
  size_t parameter_bytes = state.parameter_bytes;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, state.parameters.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &parameter_bytes, CU_LAUNCH_PARAM_END};
  return cuLaunchKernel(function, static_cast<unsigned int>(grid_width), static_cast<unsigned int>(grid_height), 1,
                        state.block[0], state.block[1], state.block[2], state.shared_bytes, stream, nullptr, extra);
}

}  // namespace

extern "C" {

CUresult cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z) {
  if (x <= 0 || y <= 0 || z <= 0) return CUDA_ERROR_INVALID_VALUE;
  return ChangeState(hfunc, [&](LegacyLaunchState& state) {
    state.block[0] = static_cast<unsigned int>(x);
    state.block[1] = static_cast<unsigned int>(y);
    state.block[2] = static_cast<unsigned int>(z);
    return CUDA_SUCCESS;
  });
}

CUresult cuFuncSetSharedSize(CUfunction hfunc, unsigned int bytes) {
  return ChangeState(hfunc, [&](LegacyLaunchState& state) {
    state.shared_bytes = bytes;
    return CUDA_SUCCESS;
  });
}

CUresult cuParamSetSize(CUfunction hfunc, unsigned int numbytes) {
  if (numbytes > kMaxParameterBytes) return CUDA_ERROR_INVALID_VALUE;
  return ChangeState(hfunc, [&](LegacyLaunchState& state) {
    state.parameter_bytes = numbytes;
    return CUDA_SUCCESS;
  });
}

CUresult cuParamSeti(CUfunction hfunc, int offset, unsigned int value) {
  return SetParameter(hfunc, offset, &value, sizeof(value));
}

CUresult cuParamSetf(CUfunction hfunc, int offset, float value) {
  return SetParameter(hfunc, offset, &value, sizeof(value));
}

CUresult cuParamSetv(CUfunction hfunc, int offset, void* ptr, unsigned int numbytes) {
  return SetParameter(hfunc, offset, ptr, numbytes);
}

CUresult cuLaunch(CUfunction f) { return LaunchGrid(f, 1, 1, nullptr); }

CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
  return LaunchGrid(f, grid_width, grid_height, nullptr);
}

CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream) {
  return LaunchGrid(f, grid_width, grid_height, hStream);
}

}  // extern "C"
