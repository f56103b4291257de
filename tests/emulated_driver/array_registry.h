// Which CUDA arrays and mipmapped arrays are alive (api_arrays.cc), for the families that bind them
// (api_texture_references.cc).
#ifndef CURELAY_TESTS_EMULATED_DRIVER_ARRAY_REGISTRY_H_
#define CURELAY_TESTS_EMULATED_DRIVER_ARRAY_REGISTRY_H_

#include <cuda.h>

namespace curelay::emulated {

bool LiveArray(CUarray array);
bool LiveMipmap(CUmipmappedArray mipmap);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_ARRAY_REGISTRY_H_
