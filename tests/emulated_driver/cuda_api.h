// Single include point for cuda.h inside the emulated driver.
//
// The library is built with -fvisibility=hidden; wrapping the declarations in
// default visibility makes every cu* function we define exported under the
// name cuda.h maps it to (cuMemAlloc -> cuMemAlloc_v2, ...), exactly like
// the real libcuda. The version script then drops everything else.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_CUDA_API_H_
#define CURELAY_TESTS_EMULATED_DRIVER_CUDA_API_H_

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "the emulated driver must see the legacy-stream ABI names"
#endif

// The driver implements deprecated entry points too (cuDeviceGetProperties,
// ...); defining them must not trip deprecation warnings.
#ifndef CUDA_ENABLE_DEPRECATED
#define CUDA_ENABLE_DEPRECATED 1
#endif

#pragma GCC visibility push(default)
#include <cuda.h>
#include <cudaProfiler.h>
#pragma GCC visibility pop

#endif  // CURELAY_TESTS_EMULATED_DRIVER_CUDA_API_H_
