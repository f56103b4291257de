// What happens when a tenant is within its memory quota but the GPU itself has no room for the allocation.
#pragma once

#include <cstdint>

namespace curelay::scheduler {

enum class MemoryPolicy : uint8_t {
  kFail,  // the allocation fails at once (CUDA_ERROR_OUT_OF_MEMORY)
  kWait,  // the request waits, up to the tenant's wait_timeout, for memory to be released on that GPU
};

}  // namespace curelay::scheduler
