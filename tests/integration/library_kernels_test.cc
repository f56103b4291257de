// Library kernels listed (cuLibraryGetKernelCount, cuLibraryEnumerateKernels) and functions loaded lazily
// (cuFuncIsLoaded, cuFuncLoad), through the whole remoting path. The executors run with CUDA_MODULE_LOADING=LAZY,
// which the emulated driver honours as the real one does: a function is loaded by cuFuncLoad or its first launch.
#include <cuda.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "tests/integration/session_environment.h"

namespace curelay::testing {
namespace {

const auto* const environment = AddSessionEnvironment("library-kernels", {{"CUDA_MODULE_LOADING", "LAZY"}});

// The extern "C" kernels of tests/kernels/test_kernels.cu, in the order the PTX declares them.
const std::vector<std::string> kKernelNames = {"vector_add",  "fill_u32",    "increment_i32", "busy_wait_ns",
                                               "param_probe", "fault_store", "add_to_global", "empty_kernel"};

class LibraryKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, 0));
    ASSERT_CU(cuCtxSetCurrent(context_));
    ptx_ = Ptx();
    ASSERT_CU(cuLibraryLoadData(&library_, ptx_.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  }
  void TearDown() override {
    if (library_ != nullptr) cuLibraryUnload(library_);
    cuDevicePrimaryCtxRelease(0);
  }

  CUcontext context_ = nullptr;
  CUlibrary library_ = nullptr;
  std::string ptx_;
};

TEST_F(LibraryKernelTest, EnumeratedKernelsAreTheHandlesGetKernelGives) {
  // One kernel got by name first: the listing must hand out that same handle.
  CUkernel fill_by_name = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&fill_by_name, library_, "fill_u32"));

  unsigned count = 0;
  ASSERT_CU(cuLibraryGetKernelCount(&count, library_));
  ASSERT_EQ(count, kKernelNames.size());
  std::vector<CUkernel> kernels(count);
  ASSERT_CU(cuLibraryEnumerateKernels(kernels.data(), count, library_));
  std::vector<std::string> names;
  for (CUkernel kernel : kernels) {
    const char* name = nullptr;
    ASSERT_CU(cuKernelGetName(&name, kernel));
    names.emplace_back(name);
    CUkernel by_name = nullptr;
    ASSERT_CU(cuLibraryGetKernel(&by_name, library_, name));
    EXPECT_EQ(by_name, kernel) << name;
  }
  EXPECT_EQ(names, kKernelNames);  // the driver's order
  EXPECT_EQ(kernels[1], fill_by_name);
  EXPECT_EQ(std::set<CUkernel>(kernels.begin(), kernels.end()).size(), kernels.size());

  // Fewer than all: the first ones.
  CUkernel first_two[2] = {};
  ASSERT_CU(cuLibraryEnumerateKernels(first_two, 2, library_));
  EXPECT_EQ(first_two[0], kernels[0]);
  EXPECT_EQ(first_two[1], kernels[1]);

  // An enumerated handle works as any kernel: bound to the context and launched.
  CUfunction fill = nullptr;
  ASSERT_CU(cuKernelGetFunction(&fill, kernels[1]));
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, 64 * sizeof(unsigned)));
  unsigned value = 42;
  unsigned long long n = 64;
  void* params[] = {&buffer, &value, &n};
  ASSERT_CU(cuLaunchKernel(fill, 1, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr));
  std::vector<unsigned> host(64);
  ASSERT_CU(cuMemcpyDtoH(host.data(), buffer, 64 * sizeof(unsigned)));
  EXPECT_EQ(host, std::vector<unsigned>(64, 42));
  ASSERT_CU(cuMemFree(buffer));
}

TEST_F(LibraryKernelTest, ListingRefusesBadArguments) {
  unsigned count = 0;
  std::vector<CUkernel> kernels(kKernelNames.size() + 1);
  EXPECT_EQ(cuLibraryGetKernelCount(nullptr, library_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryGetKernelCount(&count, reinterpret_cast<CUlibrary>(0x4321)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryEnumerateKernels(nullptr, 1, library_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryEnumerateKernels(kernels.data(), 0, library_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryEnumerateKernels(kernels.data(), static_cast<unsigned>(kernels.size()), library_),
            CUDA_ERROR_INVALID_VALUE);  // more than the library has
  EXPECT_EQ(cuLibraryEnumerateKernels(kernels.data(), 1, reinterpret_cast<CUlibrary>(0x4321)),
            CUDA_ERROR_INVALID_HANDLE);
  // An unloaded library's handle is dead, and so are its kernels.
  CUkernel kernel = nullptr;
  ASSERT_CU(cuLibraryEnumerateKernels(&kernel, 1, library_));
  ASSERT_CU(cuLibraryUnload(library_));
  EXPECT_EQ(cuLibraryGetKernelCount(&count, library_), CUDA_ERROR_INVALID_HANDLE);
  const char* name = nullptr;
  EXPECT_EQ(cuKernelGetName(&name, kernel), CUDA_ERROR_INVALID_HANDLE);
  library_ = nullptr;
}

// Unified functions: the executor's driver answers whether a library has one (the emulated GPU, as the H200, has
// no unified function pointers and refuses every name); the shim checks its own arguments first.
TEST_F(LibraryKernelTest, UnifiedFunctionsAreTheDriversToAnswer) {
  void* function = nullptr;
  EXPECT_EQ(cuLibraryGetUnifiedFunction(&function, library_, "fill_u32"), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryGetUnifiedFunction(&function, library_, "missing"), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(function, nullptr);
  EXPECT_EQ(cuLibraryGetUnifiedFunction(nullptr, library_, "fill_u32"), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryGetUnifiedFunction(&function, library_, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryGetUnifiedFunction(&function, reinterpret_cast<CUlibrary>(0x4321), "fill_u32"),
            CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(LibraryKernelTest, FunctionsLoadOnRequestOrAtTheirFirstLaunch) {
  CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
  ASSERT_CU(cuModuleGetLoadingMode(&mode));
  ASSERT_EQ(mode, CU_MODULE_LAZY_LOADING);
  CUmodule module = nullptr;
  ASSERT_CU(cuModuleLoadData(&module, ptx_.c_str()));
  CUfunction fill = nullptr, empty = nullptr;
  ASSERT_CU(cuModuleGetFunction(&fill, module, "fill_u32"));
  ASSERT_CU(cuModuleGetFunction(&empty, module, "empty_kernel"));

  CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_MAX;
  ASSERT_CU(cuFuncIsLoaded(&state, fill));
  EXPECT_EQ(state, CU_FUNCTION_LOADING_STATE_UNLOADED);
  ASSERT_CU(cuFuncLoad(fill));
  ASSERT_CU(cuFuncIsLoaded(&state, fill));
  EXPECT_EQ(state, CU_FUNCTION_LOADING_STATE_LOADED);
  ASSERT_CU(cuFuncLoad(fill));  // loading a loaded function changes nothing

  ASSERT_CU(cuFuncIsLoaded(&state, empty));
  EXPECT_EQ(state, CU_FUNCTION_LOADING_STATE_UNLOADED);
  ASSERT_CU(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuFuncIsLoaded(&state, empty));
  EXPECT_EQ(state, CU_FUNCTION_LOADING_STATE_LOADED);

  // A library kernel's function loads the same way.
  CUkernel kernel = nullptr;
  CUfunction bound = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&kernel, library_, "vector_add"));
  ASSERT_CU(cuKernelGetFunction(&bound, kernel));
  ASSERT_CU(cuFuncIsLoaded(&state, bound));
  EXPECT_EQ(state, CU_FUNCTION_LOADING_STATE_UNLOADED);
  ASSERT_CU(cuFuncLoad(bound));
  ASSERT_CU(cuFuncIsLoaded(&state, bound));
  EXPECT_EQ(state, CU_FUNCTION_LOADING_STATE_LOADED);

  EXPECT_EQ(cuFuncIsLoaded(nullptr, fill), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncIsLoaded(&state, reinterpret_cast<CUfunction>(0x4321)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuFuncLoad(nullptr), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuModuleUnload(module));
  EXPECT_EQ(cuFuncLoad(fill), CUDA_ERROR_INVALID_HANDLE);
}

}  // namespace
}  // namespace curelay::testing
