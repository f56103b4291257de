// Host implementations of the kernels in tests/kernels/test_kernels.cu.
//
// A module entry is bound to an implementation by name *and* parameter
// layout, so an unrelated kernel that happens to share a name is not run
// with the wrong arguments. Each implementation reproduces the .cu code's
// semantics over the whole grid (index arithmetic, bounds checks, which
// threads act), so results match a real GPU bit for bit.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_KERNELS_H_
#define CURELAY_TESTS_EMULATED_DRIVER_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cuda_api.h"
#include "device_access.h"
#include "module_image.h"

namespace curelay::emulated {

struct Dim3 {
  uint32_t x = 1;
  uint32_t y = 1;
  uint32_t z = 1;
};

struct LaunchShape {
  Dim3 grid;
  Dim3 block;
};

// Reads kernel arguments out of the packed parameter buffer.
class KernelArgs {
 public:
  KernelArgs(const KernelInfo& info, const std::vector<uint8_t>& buffer)
      : info_(info), buffer_(buffer) {}

  template <typename T>
  T Get(size_t index) const {
    T value{};
    const KernelParam& p = info_.params.at(index);
    std::memcpy(&value, buffer_.data() + p.offset, sizeof(T) < p.size ? sizeof(T) : p.size);
    return value;
  }

  const uint8_t* Raw(size_t index) const { return buffer_.data() + info_.params.at(index).offset; }

 private:
  const KernelInfo& info_;
  const std::vector<uint8_t>& buffer_;
};

struct KernelContext {
  const LaunchShape& shape;
  const KernelArgs& args;
  DeviceAccess& memory;
  // Device addresses of the module's variables, by name.
  const std::unordered_map<std::string, uint64_t>& globals;
};

// Returns CUDA_SUCCESS or the device fault the kernel raised.
using KernelFn = CUresult (*)(KernelContext& k);

struct KernelBinding {
  std::string_view name;
  std::vector<KernelParam> params;
  // Module variables the kernel uses, with their minimum size.
  std::vector<std::pair<std::string_view, size_t>> globals;
  KernelFn fn;
};

// The implementation for `kernel` of `image`, or nullptr if there is none
// (such a kernel loads, but launching it fails with CUDA_ERROR_NOT_SUPPORTED).
const KernelBinding* FindKernelBinding(const KernelInfo& kernel, const ModuleImage& image);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_KERNELS_H_
