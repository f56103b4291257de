// Tests of the emulated CUDA driver, loaded with dlopen() exactly as the
// executor loads a driver. The process sees two emulated devices with
// 256 MiB each (set before the library initializes).
#include <dlfcn.h>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

// Deprecated entry points (cuDeviceGetProperties, ...) are tested too.
#define CUDA_ENABLE_DEPRECATED 1
#include <cuda.h>

// Exported by the driver, declared by cuda.h only for the driver's own build.
extern "C" CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                           unsigned int flags, CUdevice dev);
extern "C" CUresult CUDAAPI cuMemMapArrayAsync_ptsz(CUarrayMapInfo* mapInfoList, unsigned int count,
                                                    CUstream hStream);

namespace {

#define CURELAY_STR2(x) #x
#define CURELAY_STR(x) CURELAY_STR2(x)

// cuda.h maps e.g. cuMemAlloc to cuMemAlloc_v2; the member names and the
// dlsym() names below go through the same macros, so each member is bound to
// the ABI symbol an application built against cuda.h would call.
#define CURELAY_API_LIST(X)                                                                   \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)       \
  X(cuDeviceGetUuid) X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDeviceGetProperties)     \
  X(cuDeviceComputeCapability) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)       \
  X(cuDevicePrimaryCtxGetState) X(cuDevicePrimaryCtxSetFlags) X(cuDevicePrimaryCtxReset)      \
  X(cuCtxCreate) X(cuCtxDestroy) X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxGetCurrent)    \
  X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuCtxGetApiVersion)              \
  X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemHostRegister) X(cuMemHostUnregister)      \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)   \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD16) X(cuMemsetD32) X(cuMemsetD8Async)         \
  X(cuMemsetD16Async) X(cuMemsetD32Async) X(cuModuleLoadData) X(cuModuleLoadDataEx)           \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncGetParamInfo)         \
  X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuStreamCreate) X(cuStreamCreateWithPriority)     \
  X(cuStreamGetPriority) X(cuStreamGetFlags) X(cuStreamDestroy) X(cuStreamSynchronize)        \
  X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventRecord)                     \
  X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime) X(cuEventDestroy)               \
  X(cuGetErrorName) X(cuGetErrorString) X(cuGetProcAddress) X(cuStreamGetCtx)                \
  X(cuDeviceGetDevResource) X(cuCtxGetDevResource) X(cuGreenCtxGetDevResource)                \
  X(cuDevSmResourceSplitByCount) X(cuDevResourceGenerateDesc) X(cuGreenCtxCreate)             \
  X(cuGreenCtxDestroy) X(cuCtxFromGreenCtx) X(cuGreenCtxGetId) X(cuGreenCtxRecordEvent)       \
  X(cuGreenCtxWaitEvent) X(cuGreenCtxStreamCreate) X(cuStreamGetGreenCtx)                       \
  X(cuCtxCreate_v3) X(cuCtxGetFlags) X(cuLaunchHostFunc) X(cuArray3DCreate)                   \
  X(cuArray3DGetDescriptor) X(cuArrayDestroy) X(cuMemcpy3D) X(cuMemcpyHtoA) X(cuMemcpyAtoH)    \
  X(cuMemcpyAtoA) X(cuTexObjectCreate) X(cuTexObjectDestroy) X(cuSurfObjectCreate)            \
  X(cuSurfObjectDestroy) X(cuMipmappedArrayCreate) X(cuMipmappedArrayGetLevel)                \
  X(cuMipmappedArrayDestroy) X(cuArrayGetMemoryRequirements)                                  \
  X(cuMipmappedArrayGetMemoryRequirements) X(cuArrayGetSparseProperties)                      \
  X(cuMipmappedArrayGetSparseProperties) X(cuArrayGetPlane) X(cuMemMapArrayAsync)             \
  X(cuMemMapArrayAsync_ptsz) X(cuPointerSetAttribute) X(cuPointerGetAttribute)                \
  X(cuPointerGetAttributes) X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphGetNodes)             \
  X(cuGraphNodeGetType) X(cuGraphAddEmptyNode) X(cuGraphAddNode) X(cuGraphLaunch)             \
  X(cuGraphInstantiateWithFlags) X(cuGraphExecDestroy) X(cuStreamBeginCapture)                \
  X(cuStreamEndCapture) X(cuStreamBatchMemOp) X(cuGraphAddBatchMemOpNode)                     \
  X(cuGraphBatchMemOpNodeGetParams) X(cuGraphBatchMemOpNodeSetParams)                         \
  X(cuGraphExecBatchMemOpNodeSetParams)

struct Api {
#define CURELAY_MEMBER(name) decltype(&::name) name = nullptr;
  CURELAY_API_LIST(CURELAY_MEMBER)
#undef CURELAY_MEMBER

  void* lib = nullptr;
  // Observed before anyone called cuInit.
  CUresult count_before_init = CUDA_SUCCESS;
  CUresult alloc_before_init = CUDA_SUCCESS;
  int version_before_init = 0;
  // Green context calls before cuInit: cuDeviceGetDevResource, cuDevSmResourceSplitByCount (a query),
  // cuGreenCtxCreate.
  CUresult green_before_init[3] = {CUDA_SUCCESS, CUDA_SUCCESS, CUDA_SUCCESS};
  std::vector<std::string> missing;
};

const Api& api() {
  static const Api* instance = [] {
    // Deterministic configuration: two devices, 256 MiB each.
    setenv("CURELAY_EMU_DEVICE_COUNT", "2", 1);
    setenv("CURELAY_EMU_DEVICE_MEMORY", "256M", 1);
    auto* a = new Api();
    a->lib = dlopen(CURELAY_EMULATED_DRIVER_PATH, RTLD_NOW | RTLD_LOCAL);
    if (a->lib == nullptr) {
      a->missing.push_back(dlerror());
      return a;
    }
#define CURELAY_LOAD(name)                                                       \
  a->name = reinterpret_cast<decltype(a->name)>(dlsym(a->lib, CURELAY_STR(name))); \
  if (a->name == nullptr) a->missing.push_back(CURELAY_STR(name));
    CURELAY_API_LIST(CURELAY_LOAD)
#undef CURELAY_LOAD
    if (!a->missing.empty()) return a;
    CUdeviceptr p;
    a->count_before_init = a->cuDeviceGetCount(nullptr);
    a->alloc_before_init = a->cuMemAlloc(&p, 16);
    a->cuDriverGetVersion(&a->version_before_init);
    CUdevResource resource{};
    unsigned groups = 0;
    CUgreenCtx green = nullptr;
    a->green_before_init[0] = a->cuDeviceGetDevResource(0, &resource, CU_DEV_RESOURCE_TYPE_SM);
    a->green_before_init[1] = a->cuDevSmResourceSplitByCount(nullptr, &groups, &resource, nullptr, 0, 8);
    a->green_before_init[2] = a->cuGreenCtxCreate(&green, nullptr, 0, CU_GREEN_CTX_DEFAULT_STREAM);
    a->cuInit(0);
    return a;
  }();
  return *instance;
}

std::string ReadFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return data;  // std::string keeps a NUL after the data, as PTX needs
}

// Extern "C" kernels of tests/kernels/test_kernels.cu, in declaration order.
constexpr const char* kKernelNames[] = {"vector_add",   "fill_u32",    "increment_i32",
                                        "busy_wait_ns", "param_probe", "fault_store",
                                        "add_to_global", "empty_kernel"};

struct ProbeStruct {
  char c;
  double d;
  int i[3];
};
static_assert(sizeof(ProbeStruct) == 32);

class EmulatedDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api().missing.empty()) << "missing: " << api().missing.front();
    ASSERT_EQ(api().cuCtxCreate(&ctx_, nullptr, 0, 0), CUDA_SUCCESS);
  }

  void TearDown() override {
    if (module_ != nullptr) api().cuModuleUnload(module_);
    if (ctx_ != nullptr) {
      EXPECT_EQ(api().cuCtxDestroy(ctx_), CUDA_SUCCESS);
    }
    CUcontext current = nullptr;
    api().cuCtxGetCurrent(&current);
    EXPECT_EQ(current, nullptr) << "test leaked a current context";
  }

  // Loads the PTX of the test kernels into the current context.
  void LoadPtx() {
    ptx_ = ReadFile(CURELAY_TEST_PTX_PATH);
    if (ptx_.empty()) GTEST_SKIP() << "no PTX at " << CURELAY_TEST_PTX_PATH;
    ASSERT_EQ(api().cuModuleLoadData(&module_, ptx_.c_str()), CUDA_SUCCESS);
  }

  CUfunction Function(const char* name) {
    CUfunction f = nullptr;
    EXPECT_EQ(api().cuModuleGetFunction(&f, module_, name), CUDA_SUCCESS) << name;
    return f;
  }

  CUdeviceptr Alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(api().cuMemAlloc(&p, bytes), CUDA_SUCCESS);
    return p;
  }

  CUresult Launch1D(CUfunction f, unsigned grid, unsigned block, void** params,
                    CUstream stream = nullptr) {
    return api().cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, params, nullptr);
  }

  CUresult BusyWait(uint64_t ns, CUstream stream) {
    void* params[] = {&ns};
    return Launch1D(Function("busy_wait_ns"), 1, 32, params, stream);
  }

  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  std::string ptx_;
};

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// --- Initialization and devices ----------------------------------------------

TEST(EmulatedDriverInit, CallsBeforeCuInitFail) {
  ASSERT_TRUE(api().missing.empty()) << "missing: " << api().missing.front();
  EXPECT_EQ(api().count_before_init, CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(api().alloc_before_init, CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(api().version_before_init, 13000);
  EXPECT_EQ(api().cuInit(0), CUDA_SUCCESS);  // idempotent
  EXPECT_EQ(api().cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

TEST(EmulatedDriverDevice, Queries) {
  ASSERT_TRUE(api().missing.empty());
  int count = 0;
  ASSERT_EQ(api().cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(api().cuDeviceGetCount(nullptr), CUDA_ERROR_INVALID_VALUE);
  CUdevice dev = -1;
  EXPECT_EQ(api().cuDeviceGet(&dev, 1), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(api().cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().cuDeviceGet(nullptr, 0), CUDA_ERROR_INVALID_VALUE);

  char name[128];
  ASSERT_EQ(api().cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
  EXPECT_NE(std::string(name).find("H200"), std::string::npos);
  char tiny[5];
  ASSERT_EQ(api().cuDeviceGetName(tiny, sizeof(tiny), 0), CUDA_SUCCESS);
  EXPECT_EQ(std::strlen(tiny), 4u);
  EXPECT_EQ(api().cuDeviceGetName(name, sizeof(name), 7), CUDA_ERROR_INVALID_DEVICE);

  CUuuid u0, u1;
  ASSERT_EQ(api().cuDeviceGetUuid(&u0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuDeviceGetUuid(&u1, 1), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(u0.bytes, u1.bytes, sizeof(u0.bytes)), 0);

  size_t total = 0;
  ASSERT_EQ(api().cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, size_t{256} << 20);

  int major = 0, minor = -1;
  ASSERT_EQ(api().cuDeviceComputeCapability(&major, &minor, 0), CUDA_SUCCESS);
  EXPECT_EQ(major, 9);
  EXPECT_EQ(minor, 0);
  CUdevprop prop;
  ASSERT_EQ(api().cuDeviceGetProperties(&prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(prop.maxThreadsPerBlock, 1024);
  EXPECT_EQ(prop.SIMDWidth, 32);
}

TEST(EmulatedDriverDevice, Attributes) {
  ASSERT_TRUE(api().missing.empty());
  auto attr = [](CUdevice_attribute a, CUdevice dev = 0) {
    int v = -12345;
    EXPECT_EQ(api().cuDeviceGetAttribute(&v, a, dev), CUDA_SUCCESS) << a;
    return v;
  };
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
  EXPECT_EQ(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), 2147483647);
  EXPECT_NE(attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0), attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));
  // Every attribute of cuda.h has a value.
  for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) attr(static_cast<CUdevice_attribute>(a));
  int v;
  EXPECT_EQ(api().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(0), 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(200), 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 5),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
            CUDA_ERROR_INVALID_VALUE);
}

TEST(EmulatedDriverErrors, NamesAndStrings) {
  ASSERT_TRUE(api().missing.empty());
  const char* s = nullptr;
  ASSERT_EQ(api().cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
  ASSERT_EQ(api().cuGetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "an illegal memory access was encountered");
  ASSERT_EQ(api().cuGetErrorString(CUDA_SUCCESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "no error");
  s = "x";
  EXPECT_EQ(api().cuGetErrorString(static_cast<CUresult>(1001), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
  s = "x";
  EXPECT_EQ(api().cuGetErrorName(static_cast<CUresult>(1001), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
  // Every code has both.
  for (int code = 0; code < 1000; ++code) {
    const char* name = nullptr;
    const char* text = nullptr;
    const CUresult rn = api().cuGetErrorName(static_cast<CUresult>(code), &name);
    const CUresult rs = api().cuGetErrorString(static_cast<CUresult>(code), &text);
    EXPECT_EQ(rn, rs) << code;
    if (rn == CUDA_SUCCESS) {
      EXPECT_TRUE(name != nullptr && text != nullptr && *text) << code;
    }
  }
}

TEST(EmulatedDriverProcAddress, ResolvesVersionedSymbols) {
  ASSERT_TRUE(api().missing.empty());
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  ASSERT_EQ(api().cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(fn, dlsym(api().lib, "cuMemAlloc_v2"));
  ASSERT_EQ(api().cuGetProcAddress("cuCtxCreate", &fn, 12080, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, dlsym(api().lib, "cuCtxCreate_v4"));
  ASSERT_EQ(api().cuGetProcAddress("cuCtxCreate", &fn, 11040, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, dlsym(api().lib, "cuCtxCreate_v3"));
  ASSERT_EQ(api().cuGetProcAddress("cuLaunchKernel", &fn, 12000,
                                   CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status),
            CUDA_SUCCESS);
  EXPECT_EQ(fn, dlsym(api().lib, "cuLaunchKernel_ptsz"));
  ASSERT_EQ(api().cuGetProcAddress("cuNoSuchThing", &fn, 12000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  ASSERT_EQ(api().cuGetProcAddress("cuFuncGetParamInfo", &fn, 12000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

// --- Contexts -----------------------------------------------------------------

TEST(EmulatedDriverContext, NoCurrentContext) {
  ASSERT_TRUE(api().missing.empty());
  CUdeviceptr p;
  EXPECT_EQ(api().cuMemAlloc(&p, 64), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  CUstream s;
  EXPECT_EQ(api().cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext c = reinterpret_cast<CUcontext>(1);
  EXPECT_EQ(api().cuCtxGetCurrent(&c), CUDA_SUCCESS);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(api().cuCtxPopCurrent(&c), CUDA_ERROR_INVALID_CONTEXT);
}

TEST(EmulatedDriverContext, StackAndDestroy) {
  ASSERT_TRUE(api().missing.empty());
  CUcontext a = nullptr, b = nullptr, cur = nullptr;
  ASSERT_EQ(api().cuCtxCreate(&a, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxCreate(&b, nullptr, CU_CTX_SCHED_BLOCKING_SYNC, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, b);
  CUdevice dev = -1;
  ASSERT_EQ(api().cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  ASSERT_EQ(api().cuCtxPopCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, b);
  ASSERT_EQ(api().cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, a);
  unsigned version = 0;
  EXPECT_EQ(api().cuCtxGetApiVersion(b, &version), CUDA_SUCCESS);
  EXPECT_GT(version, 0u);
  EXPECT_EQ(api().cuCtxCreate(&cur, nullptr, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuCtxCreate(&cur, nullptr, 0, 9), CUDA_ERROR_INVALID_DEVICE);

  // A context destroyed while current elsewhere is reported as destroyed.
  std::thread([&] {
    ASSERT_EQ(api().cuCtxPushCurrent(a), CUDA_SUCCESS);
    ASSERT_EQ(api().cuCtxSetCurrent(b), CUDA_SUCCESS);
    CUcontext mine = nullptr;
    api().cuCtxGetCurrent(&mine);
    EXPECT_EQ(mine, b);
  }).join();
  ASSERT_EQ(api().cuCtxDestroy(a), CUDA_SUCCESS);  // current: popped
  ASSERT_EQ(api().cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, nullptr);
  EXPECT_EQ(api().cuCtxDestroy(a), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(api().cuCtxPushCurrent(b), CUDA_SUCCESS);
  std::thread([&] {
    ASSERT_EQ(api().cuCtxSetCurrent(b), CUDA_SUCCESS);
  }).join();
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxDestroy(b), CUDA_SUCCESS);
  // Pushing a destroyed context fails; one made current before destruction
  // reports CONTEXT_IS_DESTROYED.
  EXPECT_EQ(api().cuCtxPushCurrent(b), CUDA_ERROR_INVALID_CONTEXT);
}

TEST(EmulatedDriverContext, DestroyedWhileCurrentOnAnotherThread) {
  ASSERT_TRUE(api().missing.empty());
  CUcontext ctx = nullptr;
  ASSERT_EQ(api().cuCtxCreate(&ctx, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  std::atomic<int> stage{0};
  CUresult after_destroy = CUDA_SUCCESS;
  std::thread t([&] {
    api().cuCtxSetCurrent(ctx);
    stage = 1;
    while (stage != 2) std::this_thread::yield();
    CUdeviceptr p;
    after_destroy = api().cuMemAlloc(&p, 16);
    api().cuCtxSetCurrent(nullptr);
  });
  while (stage != 1) std::this_thread::yield();
  ASSERT_EQ(api().cuCtxDestroy(ctx), CUDA_SUCCESS);
  stage = 2;
  t.join();
  EXPECT_EQ(after_destroy, CUDA_ERROR_CONTEXT_IS_DESTROYED);
}

TEST(EmulatedDriverContext, PrimaryContextLifecycle) {
  ASSERT_TRUE(api().missing.empty());
  unsigned flags = 99;
  int active = -1;
  ASSERT_EQ(api().cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(api().cuDevicePrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(api().cuDevicePrimaryCtxSetFlags(1, CU_CTX_SCHED_YIELD), CUDA_SUCCESS);
  CUcontext p1 = nullptr, p2 = nullptr;
  ASSERT_EQ(api().cuDevicePrimaryCtxRetain(&p1, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuDevicePrimaryCtxRetain(&p2, 1), CUDA_SUCCESS);
  EXPECT_EQ(p1, p2);
  ASSERT_EQ(api().cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_CTX_SCHED_YIELD));
  CUcontext cur = nullptr;
  ASSERT_EQ(api().cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, nullptr);  // retain does not push
  EXPECT_EQ(api().cuCtxDestroy(p1), CUDA_ERROR_INVALID_CONTEXT);

  ASSERT_EQ(api().cuCtxSetCurrent(p1), CUDA_SUCCESS);
  size_t free_before = 0, total = 0, free_after = 0;
  ASSERT_EQ(api().cuMemGetInfo(&free_before, &total), CUDA_SUCCESS);
  CUdeviceptr p;
  ASSERT_EQ(api().cuMemAlloc(&p, 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(api().cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);  // still retained once
  ASSERT_EQ(api().cuMemGetInfo(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before - (1 << 20));
  ASSERT_EQ(api().cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);  // last: reset
  EXPECT_EQ(api().cuMemAlloc(&p, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(api().cuDevicePrimaryCtxRetain(&p1, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemGetInfo(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before);  // the allocation went with the reset
  ASSERT_EQ(api().cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuDevicePrimaryCtxSetFlags(1, 0), CUDA_SUCCESS);
}

// cuCtxCreate_v3 is cuCtxCreate_v4 with only execution-affinity parameters: a list answers
// CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY (224, as the H200 with driver 580 answers outside MPS) and makes nothing;
// no list makes an ordinary context.
TEST(EmulatedDriverContext, CreateV3ExecAffinity) {
  ASSERT_TRUE(api().missing.empty());
  CUexecAffinityParam affinity{};
  affinity.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  affinity.param.smCount.val = 8;
  CUcontext ctx = nullptr, current = nullptr;
  EXPECT_EQ(api().cuCtxCreate_v3(&ctx, &affinity, 1, 0, 0), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
  EXPECT_EQ(ctx, nullptr);
  ASSERT_EQ(api().cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);

  ASSERT_EQ(api().cuCtxCreate_v3(&ctx, nullptr, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(api().cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx);
  CUdevice dev = -1;
  EXPECT_EQ(api().cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(api().cuCtxDestroy(ctx), CUDA_SUCCESS);

  // A list with no entries is no affinity either; flags and device are those of cuCtxCreate.
  ctx = nullptr;
  ASSERT_EQ(api().cuCtxCreate_v3(&ctx, &affinity, 0, CU_CTX_SCHED_BLOCKING_SYNC, 1), CUDA_SUCCESS);
  unsigned int flags = 0;
  EXPECT_EQ(api().cuCtxGetFlags(&flags), CUDA_SUCCESS);
  EXPECT_EQ(flags & CU_CTX_SCHED_MASK, static_cast<unsigned int>(CU_CTX_SCHED_BLOCKING_SYNC));
  EXPECT_EQ(api().cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(api().cuCtxDestroy(ctx), CUDA_SUCCESS);

  EXPECT_EQ(api().cuCtxCreate_v3(nullptr, nullptr, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuCtxCreate_v3(&ctx, nullptr, -1, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuCtxCreate_v3(&ctx, nullptr, 0, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuCtxCreate_v3(&ctx, nullptr, 0, 0, 9), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().cuCtxCreate_v3(&ctx, &affinity, 1, 0, 9), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(api().cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);
}

// --- Memory -------------------------------------------------------------------

TEST_F(EmulatedDriverTest, CopiesAndMemsets) {
  constexpr size_t kN = 1000;
  std::vector<uint32_t> host(kN), back(kN, 0);
  for (size_t i = 0; i < kN; ++i) host[i] = static_cast<uint32_t>(i * 2654435761u);
  CUdeviceptr a = Alloc(kN * 4);
  CUdeviceptr b = Alloc(kN * 4);
  EXPECT_EQ(a % 256, 0u);
  ASSERT_EQ(api().cuMemcpyHtoD(a, host.data(), kN * 4), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoD(b, a, kN * 4), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoH(back.data(), b, kN * 4), CUDA_SUCCESS);
  EXPECT_EQ(back, host);

  ASSERT_EQ(api().cuMemsetD32(a, 0xdeadbeef, kN), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD16(a + 8, 0x1234, 2), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD8(a + 16, 0x5a, 3), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoH(back.data(), a, kN * 4), CUDA_SUCCESS);
  EXPECT_EQ(back[0], 0xdeadbeefu);
  EXPECT_EQ(back[2], 0x12341234u);
  EXPECT_EQ(back[4], 0xde5a5a5au);
  EXPECT_EQ(back[kN - 1], 0xdeadbeefu);

  CUstream s;
  ASSERT_EQ(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD32Async(b, 7, kN, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD16Async(b, 0xffff, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD8Async(b + 4, 1, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoDAsync(a, b, kN * 4, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoHAsync(back.data(), a, kN * 4, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(back[0], 0x0000ffffu);
  EXPECT_EQ(back[1], 0x00000001u);
  EXPECT_EQ(back[2], 7u);
  ASSERT_EQ(api().cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(b), CUDA_SUCCESS);
}

TEST_F(EmulatedDriverTest, InvalidDevicePointers) {
  CUdeviceptr a = Alloc(1024);
  std::vector<uint8_t> host(2048);
  EXPECT_EQ(api().cuMemcpyHtoD(a, host.data(), 1025), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemcpyHtoD(a + 512, host.data(), 513), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemcpyHtoD(a + 512, host.data(), 512), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemcpyDtoH(host.data(), 0x1000, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemcpyHtoD(a, nullptr, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemcpyDtoD(a, reinterpret_cast<CUdeviceptr>(host.data()), 4),
            CUDA_ERROR_INVALID_VALUE);  // unregistered host memory
  EXPECT_EQ(api().cuMemsetD32(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);  // misaligned
  EXPECT_EQ(api().cuMemsetD32(a, 0, 257), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemsetD16Async(a + 1, 0, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemcpyHtoD(a, host.data(), 0), CUDA_SUCCESS);  // empty copy
  EXPECT_EQ(api().cuMemFree(a + 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemcpyHtoD(a, host.data(), 4), CUDA_ERROR_INVALID_VALUE);  // freed
  CUdeviceptr p;
  EXPECT_EQ(api().cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemAlloc(nullptr, 4), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(EmulatedDriverTest, OutOfMemoryAndMemGetInfo) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(api().cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, size_t{256} << 20);
  CUdeviceptr p;
  EXPECT_EQ(api().cuMemAlloc(&p, size_t{300} << 20), CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr big1 = Alloc(size_t{100} << 20);
  CUdeviceptr big2 = Alloc(size_t{100} << 20);
  size_t free1 = 0;
  ASSERT_EQ(api().cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free1, free0 - (size_t{200} << 20));
  EXPECT_EQ(api().cuMemAlloc(&p, free1 + 1), CUDA_ERROR_OUT_OF_MEMORY);
  // Other devices have their own memory.
  CUcontext other;
  ASSERT_EQ(api().cuCtxCreate(&other, nullptr, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemAlloc(&p, size_t{200} << 20), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxDestroy(other), CUDA_SUCCESS);  // frees it
  ASSERT_EQ(api().cuMemFree(big1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemFree(big2), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free1, free0);
  EXPECT_EQ(api().cuMemGetInfo(nullptr, &total), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(EmulatedDriverTest, HostRegistration) {
  std::vector<uint8_t> buf(8192);
  EXPECT_EQ(api().cuMemHostRegister(buf.data(), 4096, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemHostRegister(buf.data(), 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(api().cuMemHostRegister(buf.data() + 100, 64, 0),
            CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(api().cuMemHostRegister(buf.data() + 4096, 4096, CU_MEMHOSTREGISTER_DEVICEMAP),
            CUDA_SUCCESS);  // adjacent, not overlapping
  EXPECT_EQ(api().cuMemHostRegister(buf.data(), 16, 0x100), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemHostRegister(nullptr, 16, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMemHostUnregister(buf.data() + 1), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  // Registered memory is usable as a device address (unified addressing).
  EXPECT_EQ(api().cuMemsetD8(reinterpret_cast<CUdeviceptr>(buf.data()), 0x42, 16), CUDA_SUCCESS);
  EXPECT_EQ(buf[15], 0x42);
  EXPECT_EQ(api().cuMemHostUnregister(buf.data()), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemHostUnregister(buf.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(api().cuMemHostUnregister(buf.data() + 4096), CUDA_SUCCESS);
}

// cuPointerSetAttribute sets only SYNC_MEMOPS, for the whole allocation or host registration; cuPointerGetAttribute(s)
// answer it (0 until set; measured on the H200 with driver 580: 1 after setting 1).
TEST_F(EmulatedDriverTest, PointerSetAttributeSyncMemopsRoundTrip) {
  const CUdeviceptr p = Alloc(4096);
  const CUdeviceptr other = Alloc(4096);
  unsigned int sync = 7;
  ASSERT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), CUDA_SUCCESS);
  EXPECT_EQ(sync, 0u);
  const unsigned int one = 1, zero = 0;
  ASSERT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), CUDA_SUCCESS);
  sync = 7;
  ASSERT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), CUDA_SUCCESS);
  EXPECT_EQ(sync, 1u);
  // The attribute belongs to the allocation: an interior address reads it, and sets it.
  sync = 7;
  ASSERT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p + 100), CUDA_SUCCESS);
  EXPECT_EQ(sync, 1u);
  sync = 7;
  ASSERT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, other), CUDA_SUCCESS);
  EXPECT_EQ(sync, 0u);
  // The plural form agrees, and answers 0 for an address that is no allocation.
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                                      CU_POINTER_ATTRIBUTE_SYNC_MEMOPS};
  unsigned int values[3] = {7, 7, 7};
  void* data[] = {&values[0]};
  ASSERT_EQ(api().cuPointerGetAttributes(1, attributes, data, p), CUDA_SUCCESS);
  EXPECT_EQ(values[0], 1u);
  data[0] = &values[1];
  ASSERT_EQ(api().cuPointerGetAttributes(1, attributes, data, other), CUDA_SUCCESS);
  EXPECT_EQ(values[1], 0u);
  data[0] = &values[2];
  ASSERT_EQ(api().cuPointerGetAttributes(1, attributes, data, 0x1000), CUDA_SUCCESS);
  EXPECT_EQ(values[2], 0u);
  ASSERT_EQ(api().cuPointerSetAttribute(&zero, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p + 4095), CUDA_SUCCESS);
  sync = 7;
  ASSERT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), CUDA_SUCCESS);
  EXPECT_EQ(sync, 0u);
  EXPECT_EQ(api().cuMemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(other), CUDA_SUCCESS);

  // Registered host memory: the registration holds the attribute, and both forms read it.
  std::vector<uint8_t> host(8192);
  ASSERT_EQ(api().cuMemHostRegister(host.data(), 4096, 0), CUDA_SUCCESS);
  const auto host_address = reinterpret_cast<CUdeviceptr>(host.data());
  sync = 7;
  ASSERT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, host_address), CUDA_SUCCESS);
  EXPECT_EQ(sync, 0u);
  ASSERT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, host_address + 10), CUDA_SUCCESS);
  sync = 7;
  ASSERT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, host_address + 4095), CUDA_SUCCESS);
  EXPECT_EQ(sync, 1u);
  values[0] = 7;
  data[0] = &values[0];
  ASSERT_EQ(api().cuPointerGetAttributes(1, attributes, data, host_address), CUDA_SUCCESS);
  EXPECT_EQ(values[0], 1u);
  // Past the registration: not host memory the driver knows.
  EXPECT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, host_address + 4096),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, host_address + 4096),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api().cuMemHostUnregister(host.data()), CUDA_SUCCESS);
  EXPECT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, host_address),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, host_address),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(EmulatedDriverTest, PointerSetAttributeRefusals) {
  const CUdeviceptr p = Alloc(256);
  const unsigned int one = 1;
  // Only SYNC_MEMOPS is settable (measured for CONTEXT).
  EXPECT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_CONTEXT, p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), CUDA_ERROR_INVALID_VALUE);
  // An address that is no allocation (measured for 0x1000), and no value.
  EXPECT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, 0x1000), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuPointerSetAttribute(nullptr, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), CUDA_ERROR_INVALID_VALUE);
  // A freed allocation is gone.
  ASSERT_EQ(api().cuMemFree(p), CUDA_SUCCESS);
  unsigned int sync = 0;
  EXPECT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), CUDA_ERROR_INVALID_VALUE);
}

// A synchronous memset of device memory is asynchronous to the host, unless the memory's SYNC_MEMOPS is set: then
// it returns once done (and so after the device's earlier work).
TEST_F(EmulatedDriverTest, SyncMemopsMakesMemsetsSynchronous) {
  const CUdeviceptr plain = Alloc(1024);
  const CUdeviceptr synced = Alloc(1024);
  const unsigned int one = 1;
  ASSERT_EQ(api().cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, synced), CUDA_SUCCESS);
  struct Gate {
    std::atomic<bool> release{false};
    std::atomic<bool> ran{false};
  } gate;
  // Holds the device worker until released (at most 10 s, so a failure cannot hang the test).
  auto hold = [](void* arg) {
    auto* g = static_cast<Gate*>(arg);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!g->release.load() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    g->ran.store(true);
  };
  ASSERT_EQ(api().cuLaunchHostFunc(nullptr, hold, &gate), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD32(plain, 5, 256), CUDA_SUCCESS);
  EXPECT_FALSE(gate.ran.load());  // queued behind the held worker, returned at once
  EXPECT_EQ(api().cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  std::thread releaser([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.release.store(true);
  });
  ASSERT_EQ(api().cuMemsetD32(synced, 7, 256), CUDA_SUCCESS);
  EXPECT_TRUE(gate.ran.load());  // returned only once done
  EXPECT_EQ(api().cuStreamQuery(nullptr), CUDA_SUCCESS);
  releaser.join();
  std::vector<uint32_t> got(256);
  ASSERT_EQ(api().cuMemcpyDtoH(got.data(), synced, 1024), CUDA_SUCCESS);
  EXPECT_EQ(got[255], 7u);
  ASSERT_EQ(api().cuMemcpyDtoH(got.data(), plain, 1024), CUDA_SUCCESS);
  EXPECT_EQ(got[0], 5u);
  EXPECT_EQ(api().cuMemFree(plain), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(synced), CUDA_SUCCESS);
}

// --- Modules ------------------------------------------------------------------

TEST_F(EmulatedDriverTest, PtxModuleContents) {
  LoadPtx();
  for (const char* name : kKernelNames) Function(name);
  CUfunction f;
  EXPECT_EQ(api().cuModuleGetFunction(&f, module_, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(api().cuModuleGetFunction(&f, module_, nullptr), CUDA_ERROR_INVALID_VALUE);

  // The layout of param_probe's parameter buffer.
  CUfunction probe = Function("param_probe");
  const size_t offsets[] = {0, 2, 4, 8, 16, 24, 32, 64};
  const size_t sizes[] = {1, 2, 4, 8, 4, 8, 32, 8};
  for (size_t i = 0; i < 8; ++i) {
    size_t offset = 99, size = 99;
    ASSERT_EQ(api().cuFuncGetParamInfo(probe, i, &offset, &size), CUDA_SUCCESS);
    EXPECT_EQ(offset, offsets[i]) << i;
    EXPECT_EQ(size, sizes[i]) << i;
  }
  size_t offset;
  EXPECT_EQ(api().cuFuncGetParamInfo(probe, 8, &offset, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuFuncGetParamInfo(Function("empty_kernel"), 0, &offset, nullptr),
            CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr global = 0;
  size_t bytes = 0;
  ASSERT_EQ(api().cuModuleGetGlobal(&global, &bytes, module_, "global_counter"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 4u);
  EXPECT_NE(global, 0u);
  EXPECT_EQ(api().cuModuleGetGlobal(&global, &bytes, module_, "nope"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(api().cuMemFree(global), CUDA_ERROR_INVALID_VALUE);  // not a cuMemAlloc block

  int v = 0;
  ASSERT_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, probe),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 1024);
  ASSERT_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, probe), CUDA_SUCCESS);
  EXPECT_EQ(v, 90);
  ASSERT_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, probe), CUDA_SUCCESS);
  EXPECT_EQ(v, 90);
  ASSERT_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, probe), CUDA_SUCCESS);
  EXPECT_GT(v, 0);
  EXPECT_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX, probe), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(EmulatedDriverTest, CubinAndFatbinMatchPtx) {
  LoadPtx();
  for (const char* path : {CURELAY_TEST_CUBIN_PATH, CURELAY_TEST_FATBIN_PATH}) {
    SCOPED_TRACE(path);
    const std::string image = ReadFile(path);
    if (image.empty()) GTEST_SKIP() << "missing " << path;
    CUmodule mod = nullptr;
    ASSERT_EQ(api().cuModuleLoadData(&mod, image.data()), CUDA_SUCCESS);
    for (const char* name : kKernelNames) {
      CUfunction fp = Function(name);
      CUfunction fb = nullptr;
      ASSERT_EQ(api().cuModuleGetFunction(&fb, mod, name), CUDA_SUCCESS) << name;
      for (size_t i = 0;; ++i) {
        size_t po, ps, bo, bs;
        const CUresult rp = api().cuFuncGetParamInfo(fp, i, &po, &ps);
        const CUresult rb = api().cuFuncGetParamInfo(fb, i, &bo, &bs);
        ASSERT_EQ(rp, rb) << name << " param " << i;
        if (rp != CUDA_SUCCESS) break;
        EXPECT_EQ(po, bo) << name << " param " << i;
        EXPECT_EQ(ps, bs) << name << " param " << i;
      }
    }
    size_t bytes = 0;
    CUdeviceptr global = 0;
    EXPECT_EQ(api().cuModuleGetGlobal(&global, &bytes, mod, "global_counter"), CUDA_SUCCESS);
    EXPECT_EQ(bytes, 4u);

    // And the kernels run.
    CUfunction add;
    ASSERT_EQ(api().cuModuleGetFunction(&add, mod, "vector_add"), CUDA_SUCCESS);
    float ha[3] = {1, 2, 3}, hb[3] = {10, 20, 30}, hc[3] = {};
    CUdeviceptr a = Alloc(12), b = Alloc(12), c = Alloc(12);
    api().cuMemcpyHtoD(a, ha, 12);
    api().cuMemcpyHtoD(b, hb, 12);
    int n = 3;
    void* params[] = {&a, &b, &c, &n};
    ASSERT_EQ(Launch1D(add, 1, 32, params), CUDA_SUCCESS);
    ASSERT_EQ(api().cuMemcpyDtoH(hc, c, 12), CUDA_SUCCESS);
    EXPECT_EQ(hc[2], 33.0f);
    ASSERT_EQ(api().cuModuleUnload(mod), CUDA_SUCCESS);
  }
}

// Builds a single-entry fatbin (the container layout nvcc emits).
std::string MakeFatbin(uint16_t kind, uint32_t arch, uint64_t flags, const std::string& payload,
                       uint64_t uncompressed_size = 0) {
  struct Entry {
    uint16_t kind;
    uint16_t unknown0 = 0x0101;
    uint32_t header_size = 64;
    uint64_t payload_size;
    uint32_t compressed_size = 0;
    uint32_t unknown1 = 0;
    uint16_t minor = 0;
    uint16_t major = 9;
    uint32_t arch;
    uint32_t name_offset = 0;
    uint32_t name_size = 0;
    uint64_t flags;
    uint64_t unknown2 = 0;
    uint64_t uncompressed_size;
  };
  static_assert(sizeof(Entry) == 64);
  std::string padded = payload;
  padded.resize((payload.size() + 7) / 8 * 8, '\0');
  Entry e{};
  e.kind = kind;
  e.header_size = 64;
  e.payload_size = padded.size();
  e.arch = arch;
  e.flags = flags;
  e.uncompressed_size = uncompressed_size;
  const uint32_t magic = 0xBA55ED50;
  const uint16_t version = 1, header_size = 16;
  const uint64_t fat_size = sizeof(e) + padded.size();
  std::string out;
  out.append(reinterpret_cast<const char*>(&magic), 4);
  out.append(reinterpret_cast<const char*>(&version), 2);
  out.append(reinterpret_cast<const char*>(&header_size), 2);
  out.append(reinterpret_cast<const char*>(&fat_size), 8);
  out.append(reinterpret_cast<const char*>(&e), sizeof(e));
  out += padded;
  return out;
}

TEST_F(EmulatedDriverTest, FatbinAndCubinSelection) {
  const std::string ptx = ReadFile(CURELAY_TEST_PTX_PATH);
  const std::string cubin = ReadFile(CURELAY_TEST_CUBIN_PATH);
  if (ptx.empty() || cubin.empty()) GTEST_SKIP() << "kernel images not built";
  constexpr uint64_t kElf64Linux = 0x11;
  CUmodule mod;
  CUfunction f;
  // PTX-only fatbin (JIT path).
  std::string fat = MakeFatbin(1, 90, kElf64Linux, ptx + '\0');
  ASSERT_EQ(api().cuModuleLoadData(&mod, fat.data()), CUDA_SUCCESS);
  EXPECT_EQ(api().cuModuleGetFunction(&f, mod, "param_probe"), CUDA_SUCCESS);
  ASSERT_EQ(api().cuModuleUnload(mod), CUDA_SUCCESS);
  // The same through the __fatBinC_Wrapper_t indirection.
  struct {
    int magic = 0x466243b1;
    int version = 1;
    const void* data;
    void* unused = nullptr;
  } wrapper;
  wrapper.data = fat.data();
  ASSERT_EQ(api().cuModuleLoadData(&mod, &wrapper), CUDA_SUCCESS);
  ASSERT_EQ(api().cuModuleUnload(mod), CUDA_SUCCESS);
  // PTX for a newer virtual architecture cannot be JIT-compiled for sm_90,
  // and SASS for another architecture cannot run.
  fat = MakeFatbin(1, 100, kElf64Linux, ptx + '\0');
  EXPECT_EQ(api().cuModuleLoadData(&mod, fat.data()), CUDA_ERROR_NO_BINARY_FOR_GPU);
  fat = MakeFatbin(2, 80, kElf64Linux, cubin);
  EXPECT_EQ(api().cuModuleLoadData(&mod, fat.data()), CUDA_ERROR_NO_BINARY_FOR_GPU);
  std::string sm80 = cubin;
  uint32_t e_flags;
  std::memcpy(&e_flags, sm80.data() + 48, 4);
  const bool new_abi = static_cast<uint8_t>(sm80[7]) == 0x41;
  e_flags = new_abi ? (e_flags & ~0xff00u) | (80u << 8) : (e_flags & ~0xffu) | 80u;
  std::memcpy(sm80.data() + 48, &e_flags, 4);
  EXPECT_EQ(api().cuModuleLoadData(&mod, sm80.data()), CUDA_ERROR_NO_BINARY_FOR_GPU);

  // zstd-compressed PTX, when libzstd is around to compress it here.
  void* zstd = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
  if (zstd == nullptr) GTEST_SKIP() << "libzstd.so.1 not available";
  using CompressFn = size_t (*)(void*, size_t, const void*, size_t, int);
  auto compress = reinterpret_cast<CompressFn>(dlsym(zstd, "ZSTD_compress"));
  ASSERT_NE(compress, nullptr);
  std::string packed(ptx.size() + 1024, '\0');
  const size_t n = compress(packed.data(), packed.size(), ptx.c_str(), ptx.size() + 1, 3);
  ASSERT_LT(n, packed.size());
  packed.resize(n);
  fat = MakeFatbin(1, 90, kElf64Linux | 0x8000, packed, ptx.size() + 1);
  ASSERT_EQ(api().cuModuleLoadData(&mod, fat.data()), CUDA_SUCCESS);
  EXPECT_EQ(api().cuModuleGetFunction(&f, mod, "add_to_global"), CUDA_SUCCESS);
  ASSERT_EQ(api().cuModuleUnload(mod), CUDA_SUCCESS);
}

TEST_F(EmulatedDriverTest, InvalidImages) {
  CUmodule mod;
  EXPECT_EQ(api().cuModuleLoadData(&mod, "this is not PTX"), CUDA_ERROR_INVALID_IMAGE);
  const unsigned char binary[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x00};
  EXPECT_EQ(api().cuModuleLoadData(&mod, binary), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(api().cuModuleLoadData(&mod, ""), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(api().cuModuleLoadData(&mod, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuModuleLoadData(&mod, ".version 9.0\n.target sm_100\n.address_size 64\n"),
            CUDA_ERROR_INVALID_PTX);
  EXPECT_EQ(api().cuModuleLoadData(&mod, ".version 99.0\n.target sm_90\n.address_size 64\n"),
            CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  EXPECT_EQ(api().cuModuleLoadData(&mod,
                                   ".version 9.0\n.target sm_90\n.address_size 64\n"
                                   ".visible .entry broken(\n.param .u64 p\n{\nret;\n}\n"),
            CUDA_ERROR_INVALID_PTX);
  // JIT log options are filled in.
  char log[256] = "untouched";
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(sizeof(log))};
  EXPECT_EQ(api().cuModuleLoadDataEx(&mod, "junk", 2, options, values), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_NE(std::string(log).find("curelay"), std::string::npos);
}

TEST_F(EmulatedDriverTest, PtxGlobalsWithInitializers) {
  const char* ptx = R"(
.version 8.0
.target sm_80
.address_size 64
.global .align 4 .u32 scalar = 7;
.visible .global .align 4 .f32 floats[3] = {0f3F800000, 0f40000000, 0f40400000};
.visible .const .align 8 .u64 table[] = {1, 2, 3, 4};
.global .align 8 .u64 self_ref = generic(scalar)+4;
.visible .entry custom(.param .u32 x) .maxntid 128, 1, 1 { ret; }
)";
  ASSERT_EQ(api().cuModuleLoadData(&module_, ptx), CUDA_SUCCESS);
  CUdeviceptr p;
  size_t bytes;
  ASSERT_EQ(api().cuModuleGetGlobal(&p, &bytes, module_, "scalar"), CUDA_SUCCESS);
  uint32_t scalar = 0;
  api().cuMemcpyDtoH(&scalar, p, 4);
  EXPECT_EQ(scalar, 7u);
  const CUdeviceptr scalar_addr = p;
  ASSERT_EQ(api().cuModuleGetGlobal(&p, &bytes, module_, "floats"), CUDA_SUCCESS);
  float floats[3];
  api().cuMemcpyDtoH(floats, p, 12);
  EXPECT_EQ(floats[2], 3.0f);
  ASSERT_EQ(api().cuModuleGetGlobal(nullptr, &bytes, module_, "table"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 32u);
  ASSERT_EQ(api().cuModuleGetGlobal(&p, nullptr, module_, "self_ref"), CUDA_SUCCESS);
  uint64_t ref = 0;
  api().cuMemcpyDtoH(&ref, p, 8);
  EXPECT_EQ(ref, scalar_addr + 4);

  // An entry without a host implementation loads but cannot run.
  CUfunction custom = Function("custom");
  int v = 0;
  ASSERT_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, custom),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 128);
  unsigned x = 1;
  void* params[] = {&x};
  EXPECT_EQ(Launch1D(custom, 1, 256, params), CUDA_ERROR_INVALID_VALUE);  // > .maxntid
  EXPECT_EQ(Launch1D(custom, 1, 128, params), CUDA_ERROR_NOT_SUPPORTED);
}

// --- Launches -----------------------------------------------------------------

TEST_F(EmulatedDriverTest, VectorAdd) {
  LoadPtx();
  constexpr int kN = 100000;
  std::vector<float> ha(kN), hb(kN), hc(kN, -1.0f);
  for (int i = 0; i < kN; ++i) {
    ha[i] = 0.5f * static_cast<float>(i);
    hb[i] = std::sqrt(static_cast<float>(i)) + 1e-3f;
  }
  // One element more than n, to check the bounds check leaves it alone.
  CUdeviceptr a = Alloc(kN * 4), b = Alloc(kN * 4), c = Alloc((kN + 1) * 4);
  ASSERT_EQ(api().cuMemcpyHtoD(a, ha.data(), kN * 4), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyHtoD(b, hb.data(), kN * 4), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD32(c, 0xffffffff, kN + 1), CUDA_SUCCESS);
  int n = kN;
  void* params[] = {&a, &b, &c, &n};
  ASSERT_EQ(Launch1D(Function("vector_add"), (kN + 255) / 256 + 3, 256, params), CUDA_SUCCESS);
  std::vector<float> out(kN + 1);
  ASSERT_EQ(api().cuMemcpyDtoH(out.data(), c, (kN + 1) * 4), CUDA_SUCCESS);
  for (int i = 0; i < kN; ++i) ASSERT_EQ(out[i], ha[i] + hb[i]) << i;
  uint32_t sentinel;
  std::memcpy(&sentinel, &out[kN], 4);
  EXPECT_EQ(sentinel, 0xffffffffu);
}

TEST_F(EmulatedDriverTest, FillAndIncrementWithMultiDimensionalGrids) {
  LoadPtx();
  constexpr unsigned kN = 5000;
  CUdeviceptr p = Alloc(kN * 4);
  unsigned value = 0x01020304;
  unsigned long long n64 = kN;
  void* fill_params[] = {&p, &value, &n64};
  ASSERT_EQ(Launch1D(Function("fill_u32"), 20, 256, fill_params), CUDA_SUCCESS);
  int n = kN;
  void* inc_params[] = {&p, &n};
  // y and z replicate each x index: every element is incremented 2*3 times.
  ASSERT_EQ(api().cuLaunchKernel(Function("increment_i32"), 5000, 2, 1, 1, 3, 1, 0, nullptr,
                                 inc_params, nullptr),
            CUDA_SUCCESS);
  std::vector<unsigned> out(kN);
  ASSERT_EQ(api().cuMemcpyDtoH(out.data(), p, kN * 4), CUDA_SUCCESS);
  for (unsigned i = 0; i < kN; ++i) ASSERT_EQ(out[i], value + 6) << i;
}

struct ProbeArgs {
  unsigned char u8 = 0xab;
  unsigned short u16 = 0xbeef;
  unsigned int u32 = 0xdeadbeef;
  unsigned long long u64 = 0x0123456789abcdefULL;
  float f32 = -1.5f;
  double f64 = 3.141592653589793;
  ProbeStruct s{-7, -2.25, {-1, 2, 0x7fffffff}};
};

void ExpectProbe(const ProbeArgs& a, const uint64_t* out) {
  uint32_t f32_bits;
  std::memcpy(&f32_bits, &a.f32, 4);
  uint64_t f64_bits, d_bits;
  std::memcpy(&f64_bits, &a.f64, 8);
  std::memcpy(&d_bits, &a.s.d, 8);
  EXPECT_EQ(out[0], a.u8);
  EXPECT_EQ(out[1], a.u16);
  EXPECT_EQ(out[2], a.u32);
  EXPECT_EQ(out[3], a.u64);
  EXPECT_EQ(out[4], f32_bits);
  EXPECT_EQ(out[5], f64_bits);
  EXPECT_EQ(out[6], static_cast<uint64_t>(int64_t{a.s.c}));
  EXPECT_EQ(out[7], d_bits);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[8 + i], static_cast<uint64_t>(int64_t{a.s.i[i]}));
}

TEST_F(EmulatedDriverTest, ParamProbeKernelParams) {
  LoadPtx();
  CUdeviceptr out = Alloc(11 * 8);
  ProbeArgs a;
  void* params[] = {&a.u8, &a.u16, &a.u32, &a.u64, &a.f32, &a.f64, &a.s, &out};
  ASSERT_EQ(api().cuLaunchKernel(Function("param_probe"), 2, 2, 1, 32, 2, 1, 0, nullptr, params,
                                 nullptr),
            CUDA_SUCCESS);
  uint64_t words[11];
  ASSERT_EQ(api().cuMemcpyDtoH(words, out, sizeof(words)), CUDA_SUCCESS);
  ExpectProbe(a, words);
}

TEST_F(EmulatedDriverTest, ParamProbeExtraBuffer) {
  LoadPtx();
  CUfunction probe = Function("param_probe");
  CUdeviceptr out = Alloc(11 * 8);
  ProbeArgs a;
  a.u8 = 0x01;
  a.s.c = 100;
  // Pack the buffer with the offsets the driver reports.
  std::array<uint8_t, 72> buffer{};
  const void* values[] = {&a.u8, &a.u16, &a.u32, &a.u64, &a.f32, &a.f64, &a.s, &out};
  for (size_t i = 0; i < 8; ++i) {
    size_t offset, size;
    ASSERT_EQ(api().cuFuncGetParamInfo(probe, i, &offset, &size), CUDA_SUCCESS);
    ASSERT_LE(offset + size, buffer.size());
    std::memcpy(buffer.data() + offset, values[i], size);
  }
  size_t size = buffer.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &size, CU_LAUNCH_PARAM_END};
  ASSERT_EQ(api().cuLaunchKernel(probe, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra),
            CUDA_SUCCESS);
  uint64_t words[11];
  ASSERT_EQ(api().cuMemcpyDtoH(words, out, sizeof(words)), CUDA_SUCCESS);
  ExpectProbe(a, words);

  // Too small a buffer, both forms, and neither form are rejected.
  size_t small = 64;
  void* small_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(),
                         CU_LAUNCH_PARAM_BUFFER_SIZE, &small, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(api().cuLaunchKernel(probe, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, small_extra),
            CUDA_ERROR_INVALID_VALUE);
  void* params[] = {&a.u8, &a.u16, &a.u32, &a.u64, &a.f32, &a.f64, &a.s, &out};
  EXPECT_EQ(api().cuLaunchKernel(probe, 1, 1, 1, 1, 1, 1, 0, nullptr, params, extra),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuLaunchKernel(probe, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  void* no_size[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(), CU_LAUNCH_PARAM_END};
  EXPECT_EQ(api().cuLaunchKernel(probe, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, no_size),
            CUDA_ERROR_INVALID_VALUE);
  void* bad_key[] = {reinterpret_cast<void*>(0x77), nullptr, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(api().cuLaunchKernel(probe, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, bad_key),
            CUDA_ERROR_INVALID_VALUE);
  // A kernel without parameters needs neither.
  EXPECT_EQ(api().cuLaunchKernel(Function("empty_kernel"), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,
                                 nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(EmulatedDriverTest, LaunchShapeValidation) {
  LoadPtx();
  CUfunction f = Function("empty_kernel");
  auto launch = [&](unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                    unsigned shared = 0) {
    return api().cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, nullptr, nullptr, nullptr);
  };
  EXPECT_EQ(launch(0, 1, 1, 1, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 1025, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 32, 32, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 1, 1, 65), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 65536, 1, 1, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 1, 1, 1, 48 * 1024 + 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(2147483647u, 65535, 1, 32, 32, 1), CUDA_SUCCESS);  // idle threads are free
  EXPECT_EQ(launch(1, 1, 1, 1024, 1, 1, 48 * 1024), CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_SUCCESS);
}

TEST_F(EmulatedDriverTest, InvalidHandles) {
  LoadPtx();
  auto bogus = [](auto type_tag) { return reinterpret_cast<decltype(type_tag)>(0xdead0000); };
  EXPECT_EQ(api().cuStreamSynchronize(bogus(CUstream{})), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuStreamQuery(bogus(CUstream{})), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuStreamDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuEventQuery(bogus(CUevent{})), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuEventRecord(bogus(CUevent{}), nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuEventDestroy(bogus(CUevent{})), CUDA_ERROR_INVALID_HANDLE);
  CUfunction f;
  EXPECT_EQ(api().cuModuleGetFunction(&f, bogus(CUmodule{}), "vector_add"),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuModuleUnload(bogus(CUmodule{})), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuLaunchKernel(bogus(CUfunction{}), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,
                                 nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  size_t offset;
  EXPECT_EQ(api().cuFuncGetParamInfo(bogus(CUfunction{}), 0, &offset, nullptr),
            CUDA_ERROR_INVALID_HANDLE);

  // Handles of destroyed objects are invalid, not recycled.
  CUstream s;
  CUevent e;
  ASSERT_EQ(api().cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuEventSynchronize(e), CUDA_ERROR_INVALID_HANDLE);
  CUfunction add = Function("vector_add");
  ASSERT_EQ(api().cuModuleUnload(module_), CUDA_SUCCESS);
  EXPECT_EQ(api().cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuModuleUnload(module_), CUDA_ERROR_INVALID_HANDLE);
  module_ = nullptr;
}

// --- Streams and events -------------------------------------------------------

TEST_F(EmulatedDriverTest, StreamOrderAndEventTiming) {
  LoadPtx();
  CUstream s;
  ASSERT_EQ(api().cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUevent start, stop, no_timing, never;
  ASSERT_EQ(api().cuEventCreate(&start, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventCreate(&stop, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventCreate(&no_timing, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventCreate(&never, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().cuEventCreate(&never, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr p = Alloc(1024 * 4);
  ASSERT_EQ(api().cuMemsetD32(p, 0, 1024), CUDA_SUCCESS);
  const auto t0 = Clock::now();
  ASSERT_EQ(api().cuEventRecord(start, s), CUDA_SUCCESS);
  ASSERT_EQ(BusyWait(100'000'000, s), CUDA_SUCCESS);  // 100 ms
  ASSERT_EQ(api().cuEventRecord(stop, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventRecord(no_timing, s), CUDA_SUCCESS);
  int n = 1024;
  void* params[] = {&p, &n};
  ASSERT_EQ(Launch1D(Function("increment_i32"), 4, 256, params, s), CUDA_SUCCESS);
  EXPECT_LT(MsSince(t0), 50.0) << "launches must not block";

  EXPECT_EQ(api().cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(api().cuEventQuery(stop), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(api().cuEventQuery(never), CUDA_SUCCESS);
  float ms = 0;
  EXPECT_EQ(api().cuEventElapsedTime(&ms, start, stop), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(api().cuEventElapsedTime(&ms, start, never), CUDA_ERROR_INVALID_HANDLE);
  // A stream without work is idle even while the device is busy.
  CUstream idle;
  ASSERT_EQ(api().cuStreamCreate(&idle, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamQuery(idle), CUDA_SUCCESS);

  ASSERT_EQ(api().cuEventSynchronize(stop), CUDA_SUCCESS);
  EXPECT_GE(MsSince(t0), 99.0);
  ASSERT_EQ(api().cuEventElapsedTime(&ms, start, stop), CUDA_SUCCESS);
  EXPECT_GE(ms, 99.0f);
  EXPECT_LT(ms, 1000.0f);
  EXPECT_EQ(api().cuEventElapsedTime(&ms, start, no_timing), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(api().cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamQuery(s), CUDA_SUCCESS);
  std::vector<int> out(1024);
  ASSERT_EQ(api().cuMemcpyDtoH(out.data(), p, 4096), CUDA_SUCCESS);
  EXPECT_EQ(out[1023], 1);

  for (CUevent e : {start, stop, no_timing, never}) EXPECT_EQ(api().cuEventDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamDestroy(idle), CUDA_SUCCESS);
}

TEST_F(EmulatedDriverTest, CrossStreamDependencies) {
  LoadPtx();
  CUstream s1, s2;
  ASSERT_EQ(api().cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent e;
  ASSERT_EQ(api().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUdeviceptr p = Alloc(4);
  ASSERT_EQ(api().cuMemsetD32(p, 0, 1), CUDA_SUCCESS);
  int n = 1;
  void* params[] = {&p, &n};
  ASSERT_EQ(BusyWait(60'000'000, s1), CUDA_SUCCESS);
  ASSERT_EQ(Launch1D(Function("increment_i32"), 1, 1, params, s1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventRecord(e, s1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamWaitEvent(s2, e, 0), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamQuery(s2), CUDA_ERROR_NOT_READY);  // inherits the dependency
  ASSERT_EQ(Launch1D(Function("increment_i32"), 1, 1, params, s2), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamSynchronize(s2), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamQuery(s1), CUDA_SUCCESS);
  int value = 0;
  ASSERT_EQ(api().cuMemcpyDtoH(&value, p, 4), CUDA_SUCCESS);
  EXPECT_EQ(value, 2);
  EXPECT_EQ(api().cuStreamWaitEvent(s2, e, 0x10), CUDA_ERROR_INVALID_VALUE);
  api().cuEventDestroy(e);
  api().cuStreamDestroy(s1);
  api().cuStreamDestroy(s2);
}

TEST_F(EmulatedDriverTest, CrossDeviceEventWait) {
  LoadPtx();
  CUfunction busy0 = Function("busy_wait_ns");
  CUstream s0;
  ASSERT_EQ(api().cuStreamCreate(&s0, 0), CUDA_SUCCESS);
  CUevent e0;
  ASSERT_EQ(api().cuEventCreate(&e0, 0), CUDA_SUCCESS);
  unsigned long long ns = 80'000'000;
  void* busy_params[] = {&ns};
  ASSERT_EQ(Launch1D(busy0, 1, 1, busy_params, s0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventRecord(e0, s0), CUDA_SUCCESS);

  CUcontext dev1;
  ASSERT_EQ(api().cuCtxCreate(&dev1, nullptr, 0, 1), CUDA_SUCCESS);
  CUstream s1;
  ASSERT_EQ(api().cuStreamCreate(&s1, 0), CUDA_SUCCESS);
  CUevent e1;
  ASSERT_EQ(api().cuEventCreate(&e1, 0), CUDA_SUCCESS);
  const auto t0 = Clock::now();
  ASSERT_EQ(api().cuStreamWaitEvent(s1, e0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventRecord(e1, s1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventSynchronize(e1), CUDA_SUCCESS);
  EXPECT_EQ(api().cuEventQuery(e0), CUDA_SUCCESS);  // e1 completed after e0
  EXPECT_GE(MsSince(t0), 40.0);
  ASSERT_EQ(api().cuCtxDestroy(dev1), CUDA_SUCCESS);
  api().cuEventDestroy(e0);
  api().cuStreamDestroy(s0);
}

TEST_F(EmulatedDriverTest, AsyncCopySemantics) {
  LoadPtx();
  CUstream s;
  ASSERT_EQ(api().cuStreamCreate(&s, 0), CUDA_SUCCESS);
  constexpr size_t kN = 4096;
  CUdeviceptr p = Alloc(kN);
  std::vector<uint8_t> host(kN, 0x11);
  // Pageable source: staged at call time, so reuse right away is safe.
  ASSERT_EQ(BusyWait(30'000'000, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyHtoDAsync(p, host.data(), kN, s), CUDA_SUCCESS);
  std::fill(host.begin(), host.end(), 0x22);
  // Pageable destination: returns only once the copy is done.
  std::vector<uint8_t> back(kN, 0);
  ASSERT_EQ(api().cuMemcpyDtoHAsync(back.data(), p, kN, s), CUDA_SUCCESS);
  EXPECT_EQ(back[0], 0x11);
  EXPECT_EQ(back[kN - 1], 0x11);

  // Registered memory: truly asynchronous in both directions.
  std::vector<uint8_t> pinned(kN, 0x33);
  ASSERT_EQ(api().cuMemHostRegister(pinned.data(), kN, 0), CUDA_SUCCESS);
  ASSERT_EQ(BusyWait(30'000'000, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoHAsync(pinned.data(), p, kN, s), CUDA_SUCCESS);
  EXPECT_EQ(pinned[0], 0x33);  // the device is still busy
  ASSERT_EQ(api().cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(pinned[0], 0x11);
  ASSERT_EQ(api().cuMemHostUnregister(pinned.data()), CUDA_SUCCESS);
  api().cuStreamDestroy(s);
}

TEST_F(EmulatedDriverTest, StreamProperties) {
  CUstream s;
  ASSERT_EQ(api().cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -100), CUDA_SUCCESS);
  int priority = 0;
  unsigned flags = 0;
  ASSERT_EQ(api().cuStreamGetPriority(s, &priority), CUDA_SUCCESS);
  EXPECT_EQ(priority, -5);  // clamped to the greatest priority
  ASSERT_EQ(api().cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  ASSERT_EQ(api().cuStreamGetPriority(nullptr, &priority), CUDA_SUCCESS);
  EXPECT_EQ(priority, 0);
  for (CUstream special : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    EXPECT_EQ(api().cuStreamSynchronize(special), CUDA_SUCCESS);
    EXPECT_EQ(api().cuStreamQuery(special), CUDA_SUCCESS);
  }
  EXPECT_EQ(api().cuStreamCreate(&s, 0x4), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api().cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(EmulatedDriverTest, ModuleGlobalAndAtomicAdd) {
  LoadPtx();
  CUdeviceptr counter;
  size_t bytes;
  ASSERT_EQ(api().cuModuleGetGlobal(&counter, &bytes, module_, "global_counter"), CUDA_SUCCESS);
  unsigned zero = 0, v = 3, result = 0;
  ASSERT_EQ(api().cuMemcpyHtoD(counter, &zero, 4), CUDA_SUCCESS);
  void* params[] = {&v};
  ASSERT_EQ(api().cuLaunchKernel(Function("add_to_global"), 4, 2, 1, 32, 1, 2, 0, nullptr, params,
                                 nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(Launch1D(Function("add_to_global"), 1, 1, params), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoH(&result, counter, 4), CUDA_SUCCESS);
  EXPECT_EQ(result, 3u * (4 * 2 * 32 * 2 + 1));
}

// --- Faults -------------------------------------------------------------------

TEST_F(EmulatedDriverTest, StickyIllegalAddress) {
  LoadPtx();
  CUfunction empty = Function("empty_kernel");
  CUdeviceptr ok = Alloc(64);
  CUstream s;
  ASSERT_EQ(api().cuStreamCreate(&s, 0), CUDA_SUCCESS);
  CUdeviceptr bad = 0x10;
  void* params[] = {&bad};
  ASSERT_EQ(Launch1D(Function("fault_store"), 1, 32, params, s), CUDA_SUCCESS);  // async
  EXPECT_EQ(api().cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  // Sticky: every later call on the context reports it.
  CUdeviceptr p;
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(api().cuMemAlloc(&p, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
  uint32_t x = 0;
  EXPECT_EQ(api().cuMemcpyHtoD(ok, &x, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(api().cuMemcpyDtoH(&x, ok, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(Launch1D(empty, 1, 1, nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUfunction f;
  EXPECT_EQ(api().cuModuleGetFunction(&f, module_, "vector_add"), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(api().cuStreamQuery(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUevent e;
  EXPECT_EQ(api().cuEventCreate(&e, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);

  // Other contexts, on the same device, are unaffected.
  CUcontext healthy;
  ASSERT_EQ(api().cuCtxCreate(&healthy, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemAlloc(&p, 16), CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxDestroy(healthy), CUDA_SUCCESS);
  // Destroying the faulted context is the way out (TearDown).
}

TEST_F(EmulatedDriverTest, BadKernelPointersFaultInsteadOfCrashing) {
  LoadPtx();
  CUfunction add = Function("vector_add");
  CUdeviceptr a = Alloc(256 * 4), b = Alloc(256 * 4), c = Alloc(256 * 4);
  int n = 257;  // one past the allocations
  void* params[] = {&a, &b, &c, &n};
  ASSERT_EQ(Launch1D(add, 2, 256, params), CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_EQ(api().cuCtxDestroy(ctx_), CUDA_SUCCESS);
  module_ = nullptr;

  // Misaligned, on a fresh context.
  ASSERT_EQ(api().cuCtxCreate(&ctx_, nullptr, 0, 0), CUDA_SUCCESS);
  LoadPtx();
  CUdeviceptr q = Alloc(64);
  CUdeviceptr misaligned = q + 2;
  void* fault_params[] = {&misaligned};
  ASSERT_EQ(Launch1D(Function("fault_store"), 1, 1, fault_params), CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_MISALIGNED_ADDRESS);
  ASSERT_EQ(api().cuCtxDestroy(ctx_), CUDA_SUCCESS);
  module_ = nullptr;

  // Memory of another device is not mapped for this one.
  ASSERT_EQ(api().cuCtxCreate(&ctx_, nullptr, 0, 1), CUDA_SUCCESS);
  LoadPtx();
  CUcontext dev0;
  ASSERT_EQ(api().cuCtxCreate(&dev0, nullptr, 0, 0), CUDA_SUCCESS);
  CUdeviceptr on_dev0 = Alloc(64);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  void* cross_params[] = {&on_dev0};
  ASSERT_EQ(Launch1D(Function("fault_store"), 1, 1, cross_params), CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_EQ(api().cuCtxDestroy(dev0), CUDA_SUCCESS);
}

TEST(EmulatedDriverFault, PrimaryContextResetClearsStickyError) {
  ASSERT_TRUE(api().missing.empty());
  const std::string ptx = ReadFile(CURELAY_TEST_PTX_PATH);
  if (ptx.empty()) GTEST_SKIP();
  CUcontext primary;
  ASSERT_EQ(api().cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPushCurrent(primary), CUDA_SUCCESS);
  CUmodule mod;
  ASSERT_EQ(api().cuModuleLoadData(&mod, ptx.c_str()), CUDA_SUCCESS);
  CUfunction fault;
  ASSERT_EQ(api().cuModuleGetFunction(&fault, mod, "fault_store"), CUDA_SUCCESS);
  CUdeviceptr bad = 8;
  void* params[] = {&bad};
  ASSERT_EQ(api().cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_EQ(api().cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api().cuModuleGetFunction(&fault, mod, "fault_store"), CUDA_ERROR_INVALID_HANDLE);
  CUdeviceptr p;
  EXPECT_EQ(api().cuMemAlloc(&p, 16), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}

// --- Threads ------------------------------------------------------------------

TEST_F(EmulatedDriverTest, ConcurrentLaunchesFromManyThreads) {
  LoadPtx();
  constexpr int kThreads = 8;
  constexpr int kIters = 200;
  CUdeviceptr p = Alloc(4);
  ASSERT_EQ(api().cuMemsetD32(p, 0, 1), CUDA_SUCCESS);
  CUfunction inc = Function("increment_i32");
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      CUcontext mine = nullptr;
      api().cuCtxGetCurrent(&mine);
      EXPECT_EQ(mine, nullptr);  // the stack is per thread
      ASSERT_EQ(api().cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
      CUstream s;
      ASSERT_EQ(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
      int n = 1;
      void* params[] = {const_cast<CUdeviceptr*>(&p), &n};
      for (int i = 0; i < kIters; ++i) {
        ASSERT_EQ(api().cuLaunchKernel(inc, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr),
                  CUDA_SUCCESS);
      }
      ASSERT_EQ(api().cuStreamSynchronize(s), CUDA_SUCCESS);
      ASSERT_EQ(api().cuStreamDestroy(s), CUDA_SUCCESS);
      api().cuCtxSetCurrent(nullptr);
    });
  }
  for (auto& t : threads) t.join();
  int value = 0;
  ASSERT_EQ(api().cuMemcpyDtoH(&value, p, 4), CUDA_SUCCESS);
  EXPECT_EQ(value, kThreads * kIters);  // one kernel at a time: no lost updates
}

// --- Green contexts -------------------------------------------------------------

CUdevResource DeviceSmResource(CUdevice dev) {
  CUdevResource resource{};
  EXPECT_EQ(api().cuDeviceGetDevResource(dev, &resource, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  return resource;
}

// A green context on `dev` with one group of `min_count` SMs (0: the whole device).
CUgreenCtx MakeGreen(CUdevice dev, unsigned min_count = 0) {
  CUdevResource whole = DeviceSmResource(dev);
  CUdevResource group = whole;
  if (min_count != 0) {
    unsigned n = 1;
    EXPECT_EQ(api().cuDevSmResourceSplitByCount(&group, &n, &whole, nullptr, 0, min_count), CUDA_SUCCESS);
    EXPECT_EQ(n, 1u);
  }
  CUdevResourceDesc desc = nullptr;
  EXPECT_EQ(api().cuDevResourceGenerateDesc(&desc, &group, 1), CUDA_SUCCESS);
  CUgreenCtx green = nullptr;
  EXPECT_EQ(api().cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
  return green;
}

CUcontext GreenContext(CUgreenCtx green) {
  CUcontext ctx = nullptr;
  EXPECT_EQ(api().cuCtxFromGreenCtx(&ctx, green), CUDA_SUCCESS);
  return ctx;
}

unsigned SmCount(CUcontext ctx) {
  CUdevResource resource{};
  EXPECT_EQ(api().cuCtxGetDevResource(ctx, &resource, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  return resource.sm.smCount;
}

TEST(EmulatedDriverGreen, CallsBeforeCuInitFail) {
  ASSERT_TRUE(api().missing.empty()) << "missing: " << api().missing.front();
  for (CUresult r : api().green_before_init) EXPECT_EQ(r, CUDA_ERROR_NOT_INITIALIZED);
}

TEST(EmulatedDriverGreen, ProcAddressVersions) {
  ASSERT_TRUE(api().missing.empty());
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  const struct {
    const char* name;
    int version;  // the version that introduced it (cudaTypedefs.h)
  } kEntries[] = {{"cuDeviceGetDevResource", 12040}, {"cuCtxGetDevResource", 12040},
                  {"cuGreenCtxGetDevResource", 12040}, {"cuDevSmResourceSplitByCount", 12040},
                  {"cuDevResourceGenerateDesc", 12040}, {"cuGreenCtxCreate", 12040},
                  {"cuGreenCtxDestroy", 12040}, {"cuCtxFromGreenCtx", 12040},
                  {"cuGreenCtxRecordEvent", 12040}, {"cuGreenCtxWaitEvent", 12040},
                  {"cuStreamGetGreenCtx", 12040}, {"cuGreenCtxStreamCreate", 12050},
                  {"cuGreenCtxGetId", 12090}};
  for (const auto& e : kEntries) {
    ASSERT_EQ(api().cuGetProcAddress(e.name, &fn, e.version, 0, &status), CUDA_SUCCESS) << e.name;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << e.name;
    EXPECT_EQ(fn, dlsym(api().lib, e.name)) << e.name;
    EXPECT_NE(fn, nullptr) << e.name;
    ASSERT_EQ(api().cuGetProcAddress(e.name, &fn, e.version - 10, 0, &status), CUDA_SUCCESS) << e.name;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) << e.name;
    EXPECT_EQ(fn, nullptr) << e.name;
  }
}

TEST(EmulatedDriverGreen, DeviceResourceAndSplitArithmetic) {
  ASSERT_TRUE(api().missing.empty());
  CUdevResource whole{};
  ASSERT_EQ(api().cuDeviceGetDevResource(0, &whole, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  EXPECT_EQ(whole.type, CU_DEV_RESOURCE_TYPE_SM);
  EXPECT_EQ(whole.sm.smCount, 132u);
  EXPECT_EQ(whole.sm.minSmPartitionSize, 8u);
  EXPECT_EQ(whole.sm.smCoscheduledAlignment, 8u);
  CUdevResource other{};
  EXPECT_EQ(api().cuDeviceGetDevResource(0, &other, CU_DEV_RESOURCE_TYPE_INVALID), CUDA_ERROR_INVALID_RESOURCE_TYPE);
  EXPECT_EQ(api().cuDeviceGetDevResource(0, &other, static_cast<CUdevResourceType>(7)),
            CUDA_ERROR_INVALID_RESOURCE_TYPE);
  EXPECT_EQ(api().cuDeviceGetDevResource(9, &other, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().cuDeviceGetDevResource(0, nullptr, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_VALUE);

  // Queries: minCount rounded up to the alignment of 8, at least 8.
  const struct {
    unsigned flags, min_count, groups;
  } kQueries[] = {{0, 16, 8},  {0, 0, 16}, {0, 1, 16}, {0, 9, 8}, {0, 24, 5}, {0, 66, 1},
                  {0, 132, 0}, {CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, 3, 33},
                  {CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE, 16, 8}};
  for (const auto& q : kQueries) {
    unsigned n = 12345;
    CUdevResource untouched{};
    untouched.sm.smCount = 777;
    ASSERT_EQ(api().cuDevSmResourceSplitByCount(nullptr, &n, &whole, &untouched, q.flags, q.min_count), CUDA_SUCCESS)
        << q.min_count;
    EXPECT_EQ(n, q.groups) << "flags " << q.flags << " minCount " << q.min_count;
    EXPECT_EQ(untouched.sm.smCount, 777u);  // a query leaves the remainder alone
  }

  // 132 SMs, minCount 16, room for 10: 8 groups of 16 and 4 left.
  CUdevResource groups[10];
  CUdevResource remaining{};
  unsigned n = 10;
  ASSERT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &whole, &remaining, 0, 16), CUDA_SUCCESS);
  ASSERT_EQ(n, 8u);
  for (unsigned i = 0; i < n; ++i) {
    EXPECT_EQ(groups[i].type, CU_DEV_RESOURCE_TYPE_SM);
    EXPECT_EQ(groups[i].sm.smCount, 16u) << i;
    EXPECT_EQ(groups[i].sm.smCoscheduledAlignment, 8u);
  }
  EXPECT_EQ(remaining.type, CU_DEV_RESOURCE_TYPE_SM);
  EXPECT_EQ(remaining.sm.smCount, 4u);
  // Fewer groups than possible: the rest is the remainder.
  n = 3;
  ASSERT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &whole, &remaining, 0, 20), CUDA_SUCCESS);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(groups[0].sm.smCount, 24u);
  EXPECT_EQ(remaining.sm.smCount, 132u - 72u);
  n = 2;
  ASSERT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &whole, nullptr,
                                              CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, 5),
            CUDA_SUCCESS);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(groups[0].sm.smCoscheduledAlignment, 2u);
  EXPECT_EQ(groups[1].sm.smCount, 6u);

  // Invalid inputs.
  n = 4;
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(groups, nullptr, &whole, nullptr, 0, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, nullptr, nullptr, 0, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &whole, nullptr, 0, 133), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(nullptr, &n, &whole, nullptr, 0, 133), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &whole, nullptr, 0x4, 16), CUDA_ERROR_INVALID_VALUE);
  n = 0;
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &whole, nullptr, 0, 16), CUDA_ERROR_INVALID_VALUE);
  n = 4;  // minCount 130 rounds up to 136: no group fits
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &whole, nullptr, 0, 130),
            CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CUdevResource wrong_type = whole;
  wrong_type.type = CU_DEV_RESOURCE_TYPE_INVALID;
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &wrong_type, nullptr, 0, 16),
            CUDA_ERROR_INVALID_RESOURCE_TYPE);
  CUdevResource forged{};  // an SM resource the driver never made
  forged.type = CU_DEV_RESOURCE_TYPE_SM;
  forged.sm = whole.sm;
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &forged, nullptr, 0, 16), CUDA_ERROR_INVALID_VALUE);
  CUdevResource edited = whole;
  edited.sm.smCount = 264;
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(nullptr, &n, &edited, nullptr, 0, 16), CUDA_ERROR_INVALID_VALUE);
  // A split's outputs are not split again.
  n = 2;
  ASSERT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &whole, &remaining, 0, 32), CUDA_SUCCESS);
  CUdevResource again[4];
  unsigned m = 4;
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(again, &m, &groups[0], nullptr, 0, 8),
            CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  EXPECT_EQ(api().cuDevSmResourceSplitByCount(again, &m, &remaining, nullptr, 0, 8),
            CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
}

TEST(EmulatedDriverGreen, DescCreateAndContextResources) {
  ASSERT_TRUE(api().missing.empty());
  int active_before = -1;
  unsigned primary_flags = 0;
  ASSERT_EQ(api().cuDevicePrimaryCtxGetState(0, &primary_flags, &active_before), CUDA_SUCCESS);

  CUdevResource whole = DeviceSmResource(0);
  CUdevResource groups[3], remaining{};
  unsigned n = 3;
  ASSERT_EQ(api().cuDevSmResourceSplitByCount(groups, &n, &whole, &remaining, 0, 16), CUDA_SUCCESS);
  ASSERT_EQ(n, 3u);
  CUdevResourceDesc desc = nullptr;
  // Two groups of one split: 32 SMs.
  ASSERT_EQ(api().cuDevResourceGenerateDesc(&desc, groups, 2), CUDA_SUCCESS);
  ASSERT_NE(desc, nullptr);

  // Descriptor errors.
  CUdevResourceDesc bad = nullptr;
  EXPECT_EQ(api().cuDevResourceGenerateDesc(&bad, groups, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuDevResourceGenerateDesc(&bad, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuDevResourceGenerateDesc(nullptr, groups, 1), CUDA_ERROR_INVALID_VALUE);
  CUdevResource twice[2] = {groups[0], groups[0]};
  EXPECT_EQ(api().cuDevResourceGenerateDesc(&bad, twice, 2), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CUdevResource mixed[2] = {whole, groups[0]};
  EXPECT_EQ(api().cuDevResourceGenerateDesc(&bad, mixed, 2), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CUdevResource other_split[2];
  unsigned m = 2;
  ASSERT_EQ(api().cuDevSmResourceSplitByCount(other_split, &m, &whole, nullptr, 0, 16), CUDA_SUCCESS);
  CUdevResource two_splits[2] = {groups[0], other_split[1]};
  EXPECT_EQ(api().cuDevResourceGenerateDesc(&bad, two_splits, 2), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CUdevResource whole1 = DeviceSmResource(1);
  CUdevResource two_devices[2] = {whole, whole1};
  EXPECT_EQ(api().cuDevResourceGenerateDesc(&bad, two_devices, 2), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CUdevResource not_sm = groups[0];
  not_sm.type = CU_DEV_RESOURCE_TYPE_INVALID;
  EXPECT_EQ(api().cuDevResourceGenerateDesc(&bad, &not_sm, 1), CUDA_ERROR_INVALID_RESOURCE_TYPE);
  CUdevResource with_remainder[3] = {groups[0], groups[2], remaining};
  CUdevResourceDesc desc_all = nullptr;
  EXPECT_EQ(api().cuDevResourceGenerateDesc(&desc_all, with_remainder, 3), CUDA_SUCCESS);

  // Creation errors.
  CUgreenCtx green = nullptr;
  EXPECT_EQ(api().cuGreenCtxCreate(&green, desc, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGreenCtxCreate(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM | 0x2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGreenCtxCreate(&green, desc, 1, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGreenCtxCreate(&green, desc, 9, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().cuGreenCtxCreate(&green, nullptr, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGreenCtxCreate(nullptr, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(green, nullptr);

  ASSERT_EQ(api().cuGreenCtxCreate(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
  ASSERT_NE(green, nullptr);
  CUcontext current = reinterpret_cast<CUcontext>(1);
  ASSERT_EQ(api().cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);  // not made current
  // The primary context is retained while the green context lives.
  int active = -1;
  ASSERT_EQ(api().cuDevicePrimaryCtxGetState(0, &primary_flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);

  CUcontext ctx = nullptr, ctx_again = nullptr;
  ASSERT_EQ(api().cuCtxFromGreenCtx(&ctx, green), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxFromGreenCtx(&ctx_again, green), CUDA_SUCCESS);
  EXPECT_NE(ctx, nullptr);
  EXPECT_EQ(ctx, ctx_again);
  EXPECT_NE(reinterpret_cast<void*>(ctx), reinterpret_cast<void*>(green));
  EXPECT_EQ(api().cuCtxFromGreenCtx(nullptr, green), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuCtxFromGreenCtx(&ctx_again, nullptr), CUDA_ERROR_INVALID_CONTEXT);
  // A green context handle is no CUcontext.
  EXPECT_EQ(api().cuCtxPushCurrent(reinterpret_cast<CUcontext>(green)), CUDA_ERROR_INVALID_CONTEXT);

  // Resources: the green context's SMs; the device's for other contexts.
  EXPECT_EQ(SmCount(ctx), 32u);
  CUdevResource resource{};
  ASSERT_EQ(api().cuGreenCtxGetDevResource(green, &resource, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  EXPECT_EQ(resource.sm.smCount, 32u);
  EXPECT_EQ(resource.sm.minSmPartitionSize, 8u);
  EXPECT_EQ(api().cuGreenCtxGetDevResource(green, &resource, CU_DEV_RESOURCE_TYPE_INVALID),
            CUDA_ERROR_INVALID_RESOURCE_TYPE);
  EXPECT_EQ(api().cuGreenCtxGetDevResource(green, nullptr, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGreenCtxGetDevResource(nullptr, &resource, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuCtxGetDevResource(ctx, &resource, CU_DEV_RESOURCE_TYPE_INVALID),
            CUDA_ERROR_INVALID_RESOURCE_TYPE);
  EXPECT_EQ(api().cuCtxGetDevResource(ctx, nullptr, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_VALUE);
  // A green context's resource may be split again (it comes from cuGreenCtxGetDevResource): 32 SMs in two 16s.
  CUdevResource halves[4];
  unsigned h = 4;
  ASSERT_EQ(api().cuDevSmResourceSplitByCount(halves, &h, &resource, nullptr, 0, 16), CUDA_SUCCESS);
  EXPECT_EQ(h, 2u);
  CUcontext plain = nullptr, primary = nullptr;
  ASSERT_EQ(api().cuCtxCreate(&plain, nullptr, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(SmCount(plain), 132u);
  EXPECT_EQ(SmCount(nullptr), 132u);  // null: the current context
  ASSERT_EQ(api().cuCtxPushCurrent(ctx), CUDA_SUCCESS);
  EXPECT_EQ(SmCount(nullptr), 32u);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  EXPECT_EQ(SmCount(primary), 132u);
  EXPECT_NE(primary, ctx);  // the green context's CUcontext is its own
  ASSERT_EQ(api().cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);

  // Ids: unique, nonzero, increasing; NULL means the current context's green context.
  CUgreenCtx green2 = nullptr;
  ASSERT_EQ(api().cuGreenCtxCreate(&green2, desc_all, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
  EXPECT_EQ(SmCount(GreenContext(green2)), 16u + 16u + 84u);  // two groups and the remainder
  unsigned long long id1 = 0, id2 = 0, id_current = 0;
  ASSERT_EQ(api().cuGreenCtxGetId(green, &id1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuGreenCtxGetId(green2, &id2), CUDA_SUCCESS);
  EXPECT_NE(id1, 0u);
  EXPECT_GT(id2, id1);
  EXPECT_EQ(api().cuGreenCtxGetId(green, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGreenCtxGetId(nullptr, &id_current), CUDA_ERROR_INVALID_CONTEXT);  // `plain` is current
  ASSERT_EQ(api().cuCtxPushCurrent(GreenContext(green2)), CUDA_SUCCESS);
  ASSERT_EQ(api().cuGreenCtxGetId(nullptr, &id_current), CUDA_SUCCESS);
  EXPECT_EQ(id_current, id2);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);

  // The derived context works as a context: current, memory, synchronize; only cuGreenCtxDestroy destroys it.
  ASSERT_EQ(api().cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  CUdevice dev = -1;
  ASSERT_EQ(api().cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().cuMemAlloc(&p, 1024), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD8(p, 0x5a, 1024), CUDA_SUCCESS);
  unsigned char byte = 0;
  ASSERT_EQ(api().cuMemcpyDtoH(&byte, p + 1000, 1), CUDA_SUCCESS);
  EXPECT_EQ(byte, 0x5a);
  ASSERT_EQ(api().cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxDestroy(ctx), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(api().cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx);  // still there and current
  ASSERT_EQ(api().cuMemFree(p), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);

  ASSERT_EQ(api().cuGreenCtxDestroy(green2), CUDA_SUCCESS);
  ASSERT_EQ(api().cuGreenCtxDestroy(green), CUDA_SUCCESS);
  ASSERT_EQ(api().cuDevicePrimaryCtxGetState(0, &primary_flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, active_before);  // the green contexts' retains are released
  ASSERT_EQ(api().cuCtxDestroy(plain), CUDA_SUCCESS);
}

TEST_F(EmulatedDriverTest, GreenStreamKernelMemsetAndCopy) {
  const std::string ptx = ReadFile(CURELAY_TEST_PTX_PATH);
  if (ptx.empty()) GTEST_SKIP() << "no PTX at " << CURELAY_TEST_PTX_PATH;
  CUgreenCtx green = MakeGreen(0, 16);
  ASSERT_NE(green, nullptr);
  CUcontext gctx = GreenContext(green);

  // The stream belongs to the green context whatever is current (here: the fixture's context).
  CUstream s = nullptr;
  EXPECT_EQ(api().cuGreenCtxStreamCreate(&s, green, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING | 0x4, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGreenCtxStreamCreate(nullptr, green, CU_STREAM_NON_BLOCKING, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGreenCtxStreamCreate(&s, nullptr, CU_STREAM_NON_BLOCKING, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(api().cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, -100), CUDA_SUCCESS);
  CUcontext owner = nullptr;
  ASSERT_EQ(api().cuStreamGetCtx(s, &owner), CUDA_SUCCESS);
  EXPECT_EQ(owner, gctx);
  int priority = 0;
  unsigned flags = 0;
  ASSERT_EQ(api().cuStreamGetPriority(s, &priority), CUDA_SUCCESS);
  EXPECT_EQ(priority, -5);
  ASSERT_EQ(api().cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  // Also from a thread without any current context.
  std::thread([&] {
    CUstream t = nullptr;
    ASSERT_EQ(api().cuGreenCtxStreamCreate(&t, green, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
    CUcontext c = nullptr;
    EXPECT_EQ(api().cuStreamGetCtx(t, &c), CUDA_SUCCESS);
    EXPECT_EQ(c, gctx);
    EXPECT_EQ(api().cuStreamDestroy(t), CUDA_SUCCESS);
  }).join();

  // A module and memory of the green context; a kernel, a memset and a copy on the green stream.
  ASSERT_EQ(api().cuCtxPushCurrent(gctx), CUDA_SUCCESS);
  CUmodule mod = nullptr;
  ASSERT_EQ(api().cuModuleLoadData(&mod, ptx.c_str()), CUDA_SUCCESS);
  CUfunction fill = nullptr;
  ASSERT_EQ(api().cuModuleGetFunction(&fill, mod, "fill_u32"), CUDA_SUCCESS);
  constexpr unsigned long long kN = 5000;
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(api().cuMemAlloc(&a, kN * 4), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemAlloc(&b, kN * 4), CUDA_SUCCESS);
  unsigned value = 0xC0FFEEu;
  unsigned long long n = kN;
  void* params[] = {&a, &value, &n};
  ASSERT_EQ(api().cuLaunchKernel(fill, (kN + 255) / 256, 1, 1, 256, 1, 1, 0, s, params, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD32Async(b, 0x1234u, kN, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoDAsync(b + 4 * 100, a, 4 * 10, s), CUDA_SUCCESS);
  std::vector<unsigned> host_a(kN, 0), host_b(kN, 0);
  ASSERT_EQ(api().cuMemcpyDtoHAsync(host_a.data(), a, kN * 4, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoHAsync(host_b.data(), b, kN * 4, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamSynchronize(s), CUDA_SUCCESS);
  for (unsigned long long i = 0; i < kN; ++i) {
    ASSERT_EQ(host_a[i], 0xC0FFEEu) << i;
    ASSERT_EQ(host_b[i], i >= 100 && i < 110 ? 0xC0FFEEu : 0x1234u) << i;
  }
  // A host-to-device copy and the legacy stream of the green context.
  std::vector<unsigned> src(kN);
  for (unsigned long long i = 0; i < kN; ++i) src[i] = static_cast<unsigned>(i * 7);
  ASSERT_EQ(api().cuMemcpyHtoDAsync(a, src.data(), kN * 4, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyDtoH(host_a.data(), a, kN * 4), CUDA_SUCCESS);
  EXPECT_EQ(host_a, src);

  ASSERT_EQ(api().cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuGreenCtxDestroy(green), CUDA_SUCCESS);
}

TEST_F(EmulatedDriverTest, GreenRecordAndWaitEvents) {
  const std::string ptx = ReadFile(CURELAY_TEST_PTX_PATH);
  if (ptx.empty()) GTEST_SKIP() << "no PTX at " << CURELAY_TEST_PTX_PATH;
  constexpr size_t kN = 1024;
  std::vector<unsigned> host(kN, 0);
  ASSERT_EQ(api().cuMemHostRegister(host.data(), kN * 4, 0), CUDA_SUCCESS);  // the fixture's context
  const CUdeviceptr host_ptr = reinterpret_cast<CUdeviceptr>(host.data());
  const auto all_equal = [&](unsigned v) {
    for (unsigned x : host) {
      if (x != v) return false;
    }
    return true;
  };

  CUgreenCtx green = MakeGreen(0, 64);
  CUcontext gctx = GreenContext(green);
  CUstream s = nullptr;
  ASSERT_EQ(api().cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPushCurrent(gctx), CUDA_SUCCESS);
  CUmodule mod = nullptr;
  ASSERT_EQ(api().cuModuleLoadData(&mod, ptx.c_str()), CUDA_SUCCESS);
  CUfunction busy = nullptr;
  ASSERT_EQ(api().cuModuleGetFunction(&busy, mod, "busy_wait_ns"), CUDA_SUCCESS);
  unsigned long long ns = 150'000'000;
  void* busy_params[] = {&ns};
  CUevent e = nullptr;
  ASSERT_EQ(api().cuEventCreate(&e, 0), CUDA_SUCCESS);

  // Record: the event captures the work of the green stream...
  ASSERT_EQ(api().cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, s, busy_params, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD32Async(host_ptr, 7, kN, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuGreenCtxRecordEvent(green, e), CUDA_SUCCESS);
  EXPECT_EQ(api().cuEventQuery(e), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(api().cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_TRUE(all_equal(7));
  // ... and of the green context's default (legacy) stream.
  ASSERT_EQ(api().cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, nullptr, busy_params, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD32Async(host_ptr, 9, kN, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuGreenCtxRecordEvent(green, e), CUDA_SUCCESS);
  EXPECT_EQ(api().cuEventQuery(e), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(api().cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_TRUE(all_equal(9));

  // Events of another context are refused; one of the device's primary context is accepted.
  CUevent foreign = nullptr;
  ASSERT_EQ(api().cuCtxPushCurrent(ctx_), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventCreate(&foreign, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGreenCtxRecordEvent(green, foreign), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuGreenCtxRecordEvent(green, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuGreenCtxRecordEvent(nullptr, e), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext primary = nullptr;
  ASSERT_EQ(api().cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPushCurrent(primary), CUDA_SUCCESS);
  CUevent primary_event = nullptr;
  ASSERT_EQ(api().cuEventCreate(&primary_event, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGreenCtxRecordEvent(green, primary_event), CUDA_SUCCESS);
  EXPECT_EQ(api().cuEventSynchronize(primary_event), CUDA_SUCCESS);
  EXPECT_EQ(api().cuEventDestroy(primary_event), CUDA_SUCCESS);
  ASSERT_EQ(api().cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);

  // Wait: an event of device 1 holds all later work of the green context (device 0) until it completes.
  CUcontext dev1 = nullptr;
  ASSERT_EQ(api().cuCtxCreate(&dev1, nullptr, 0, 1), CUDA_SUCCESS);
  CUmodule mod1 = nullptr;
  ASSERT_EQ(api().cuModuleLoadData(&mod1, ptx.c_str()), CUDA_SUCCESS);
  CUfunction busy1 = nullptr;
  ASSERT_EQ(api().cuModuleGetFunction(&busy1, mod1, "busy_wait_ns"), CUDA_SUCCESS);
  CUstream s1 = nullptr;
  ASSERT_EQ(api().cuStreamCreate(&s1, 0), CUDA_SUCCESS);
  CUevent e1 = nullptr;
  ASSERT_EQ(api().cuEventCreate(&e1, 0), CUDA_SUCCESS);
  const auto t0 = Clock::now();
  ASSERT_EQ(api().cuLaunchKernel(busy1, 1, 1, 1, 1, 1, 1, 0, s1, busy_params, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventRecord(e1, s1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);  // the green context is current again
  ASSERT_EQ(api().cuGreenCtxWaitEvent(green, e1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD32Async(host_ptr, 11, kN, s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(api().cuEventQuery(e1), CUDA_SUCCESS);  // the green stream's memset ran after e1
  EXPECT_GE(MsSince(t0), 75.0);
  EXPECT_TRUE(all_equal(11));
  EXPECT_EQ(api().cuGreenCtxWaitEvent(green, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuGreenCtxWaitEvent(nullptr, e1), CUDA_ERROR_INVALID_CONTEXT);

  ASSERT_EQ(api().cuStreamDestroy(s), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuGreenCtxDestroy(green), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxDestroy(dev1), CUDA_SUCCESS);
  EXPECT_EQ(api().cuEventDestroy(foreign), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemHostUnregister(host.data()), CUDA_SUCCESS);
}

TEST_F(EmulatedDriverTest, GreenStreamGetGreenCtx) {
  CUgreenCtx green = MakeGreen(0, 8);
  CUcontext gctx = GreenContext(green);
  CUstream green_stream = nullptr, plain_stream = nullptr, created_in_green = nullptr;
  ASSERT_EQ(api().cuGreenCtxStreamCreate(&green_stream, green, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamCreate(&plain_stream, 0), CUDA_SUCCESS);  // the fixture's context

  CUgreenCtx found = nullptr;
  ASSERT_EQ(api().cuStreamGetGreenCtx(green_stream, &found), CUDA_SUCCESS);
  EXPECT_EQ(found, green);
  found = reinterpret_cast<CUgreenCtx>(1);
  ASSERT_EQ(api().cuStreamGetGreenCtx(plain_stream, &found), CUDA_SUCCESS);
  EXPECT_EQ(found, nullptr);
  for (CUstream special : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    found = reinterpret_cast<CUgreenCtx>(1);
    ASSERT_EQ(api().cuStreamGetGreenCtx(special, &found), CUDA_SUCCESS);
    EXPECT_EQ(found, nullptr);  // the current context is an ordinary one
  }
  EXPECT_EQ(api().cuStreamGetGreenCtx(green_stream, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuStreamGetGreenCtx(reinterpret_cast<CUstream>(0x1234560), &found), CUDA_ERROR_INVALID_HANDLE);

  ASSERT_EQ(api().cuCtxPushCurrent(gctx), CUDA_SUCCESS);
  for (CUstream special : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    found = nullptr;
    ASSERT_EQ(api().cuStreamGetGreenCtx(special, &found), CUDA_SUCCESS);
    EXPECT_EQ(found, green);
  }
  // A stream made by cuStreamCreate while the green context's CUcontext is current is the green context's.
  ASSERT_EQ(api().cuStreamCreate(&created_in_green, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  found = nullptr;
  ASSERT_EQ(api().cuStreamGetGreenCtx(created_in_green, &found), CUDA_SUCCESS);
  EXPECT_EQ(found, green);
  found = reinterpret_cast<CUgreenCtx>(1);
  ASSERT_EQ(api().cuStreamGetGreenCtx(plain_stream, &found), CUDA_SUCCESS);
  EXPECT_EQ(found, nullptr);  // a created stream answers for its own context
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);

  EXPECT_EQ(api().cuStreamDestroy(created_in_green), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamDestroy(green_stream), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamDestroy(plain_stream), CUDA_SUCCESS);
  ASSERT_EQ(api().cuGreenCtxDestroy(green), CUDA_SUCCESS);
}

TEST(EmulatedDriverGreen, DestroyAndUseAfterDestroy) {
  ASSERT_TRUE(api().missing.empty());
  size_t free_before = 0, free_after = 0, total = 0;
  CUcontext plain = nullptr;
  ASSERT_EQ(api().cuCtxCreate(&plain, nullptr, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemGetInfo(&free_before, &total), CUDA_SUCCESS);

  CUgreenCtx green = MakeGreen(1, 40);
  ASSERT_NE(green, nullptr);
  CUcontext gctx = GreenContext(green);
  EXPECT_EQ(SmCount(gctx), 40u);
  CUstream s = nullptr;
  ASSERT_EQ(api().cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  CUevent e = nullptr;
  ASSERT_EQ(api().cuCtxPushCurrent(gctx), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api().cuMemAlloc(&p, 4 << 20), CUDA_SUCCESS);
  ASSERT_EQ(api().cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemsetD32Async(p, 1, 1 << 20, s), CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxDestroy(gctx), CUDA_ERROR_INVALID_CONTEXT);  // only cuGreenCtxDestroy destroys it

  // Another thread keeps the context current across the destruction.
  std::atomic<int> stage{0};
  CUresult other_thread_after = CUDA_SUCCESS;
  std::thread t([&] {
    api().cuCtxSetCurrent(gctx);
    stage = 1;
    while (stage != 2) std::this_thread::yield();
    CUdeviceptr q;
    other_thread_after = api().cuMemAlloc(&q, 16);
    api().cuCtxSetCurrent(nullptr);
  });
  while (stage != 1) std::this_thread::yield();

  ASSERT_EQ(api().cuGreenCtxDestroy(green), CUDA_SUCCESS);
  stage = 2;
  t.join();
  EXPECT_EQ(other_thread_after, CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext current = nullptr;
  ASSERT_EQ(api().cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, plain);  // the green context's CUcontext was popped
  ASSERT_EQ(api().cuMemGetInfo(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before);  // its memory went with it

  // Everything about the destroyed green context is refused.
  CUcontext c = nullptr;
  unsigned long long id = 0;
  CUdevResource resource{};
  CUstream s2 = nullptr;
  CUgreenCtx found = nullptr;
  EXPECT_EQ(api().cuGreenCtxDestroy(green), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuCtxFromGreenCtx(&c, green), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuGreenCtxGetId(green, &id), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuGreenCtxGetDevResource(green, &resource, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuGreenCtxStreamCreate(&s2, green, CU_STREAM_NON_BLOCKING, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuGreenCtxRecordEvent(green, e), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuGreenCtxWaitEvent(green, e), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuCtxPushCurrent(gctx), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuCtxGetDevResource(gctx, &resource, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuCtxDestroy(gctx), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);  // its events went with it
  // Its streams stay behind, unusable (cuda.h: CUDA_ERROR_CONTEXT_IS_DESTROYED, cuStreamDestroy included).
  EXPECT_EQ(api().cuStreamSynchronize(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(api().cuStreamGetGreenCtx(s, &found), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(api().cuStreamDestroy(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  // Unknown handles.
  EXPECT_EQ(api().cuGreenCtxDestroy(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(api().cuGreenCtxDestroy(reinterpret_cast<CUgreenCtx>(plain)), CUDA_ERROR_INVALID_CONTEXT);

  // The green context's CUcontext deeper in the stack reads as destroyed once it is on top.
  CUgreenCtx green2 = MakeGreen(1);
  ASSERT_EQ(api().cuCtxPushCurrent(GreenContext(green2)), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPushCurrent(plain), CUDA_SUCCESS);
  ASSERT_EQ(api().cuGreenCtxDestroy(green2), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  CUdevice dev = -1;
  EXPECT_EQ(api().cuCtxGetDevice(&dev), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(api().cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxDestroy(plain), CUDA_SUCCESS);
  ASSERT_EQ(api().cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);
}

// --- Mipmapped arrays and array queries ----------------------------------------

CUDA_ARRAY3D_DESCRIPTOR FloatDescriptor(size_t width, size_t height, size_t depth) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = width;
  d.Height = height;
  d.Depth = depth;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 1;
  return d;
}

// Level `level`'s descriptor, through cuMipmappedArrayGetLevel and cuArray3DGetDescriptor.
CUDA_ARRAY3D_DESCRIPTOR LevelDescriptor(CUmipmappedArray mipmap, unsigned level) {
  CUarray array = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&array, mipmap, level), CUDA_SUCCESS) << "level " << level;
  EXPECT_EQ(api().cuArray3DGetDescriptor(&d, array), CUDA_SUCCESS) << "level " << level;
  return d;
}

// Level i: max(1, dim >> i) for each dimension the descriptor uses (measured on the H200 with driver 580: 64x48
// float level 2 is 16x12, depth 0); numLevels 0 makes one level, and beyond the full chain is clamped to it (the
// driver takes 30 levels for 64x48).
TEST_F(EmulatedDriverTest, MipmappedArrayLevelDimensions) {
  CUDA_ARRAY3D_DESCRIPTOR desc = FloatDescriptor(64, 48, 0);
  CUmipmappedArray mipmap = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 4), CUDA_SUCCESS);
  const size_t expected[4][2] = {{64, 48}, {32, 24}, {16, 12}, {8, 6}};
  for (unsigned level = 0; level < 4; ++level) {
    const CUDA_ARRAY3D_DESCRIPTOR d = LevelDescriptor(mipmap, level);
    EXPECT_EQ(d.Width, expected[level][0]) << level;
    EXPECT_EQ(d.Height, expected[level][1]) << level;
    EXPECT_EQ(d.Depth, 0u) << level;
    EXPECT_EQ(d.Format, CU_AD_FORMAT_FLOAT);
    EXPECT_EQ(d.NumChannels, 1u);
    EXPECT_EQ(d.Flags, 0u);
  }
  CUarray level = nullptr;
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&level, mipmap, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);

  // 30 levels of 64x48: the full chain, 7 levels, down to 1x1.
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 30), CUDA_SUCCESS);
  CUDA_ARRAY3D_DESCRIPTOR d = LevelDescriptor(mipmap, 6);
  EXPECT_EQ(d.Width, 1u);
  EXPECT_EQ(d.Height, 1u);
  d = LevelDescriptor(mipmap, 5);
  EXPECT_EQ(d.Width, 2u);
  EXPECT_EQ(d.Height, 1u);
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&level, mipmap, 7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);

  // 0 levels: one.
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 0), CUDA_SUCCESS);
  d = LevelDescriptor(mipmap, 0);
  EXPECT_EQ(d.Width, 64u);
  EXPECT_EQ(d.Height, 48u);
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&level, mipmap, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);

  // 3D: every dimension shrinks; the chain follows the largest.
  desc = FloatDescriptor(8, 4, 2);
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 10), CUDA_SUCCESS);
  d = LevelDescriptor(mipmap, 1);
  EXPECT_EQ(d.Width, 4u);
  EXPECT_EQ(d.Height, 2u);
  EXPECT_EQ(d.Depth, 1u);
  d = LevelDescriptor(mipmap, 3);
  EXPECT_EQ(d.Width, 1u);
  EXPECT_EQ(d.Height, 1u);
  EXPECT_EQ(d.Depth, 1u);
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&level, mipmap, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);

  // 1D: an unused height stays 0.
  desc = FloatDescriptor(100, 0, 0);
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 100), CUDA_SUCCESS);
  d = LevelDescriptor(mipmap, 6);
  EXPECT_EQ(d.Width, 1u);
  EXPECT_EQ(d.Height, 0u);
  EXPECT_EQ(d.Depth, 0u);
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&level, mipmap, 7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);

  // cuArray3DCreate's descriptor checks.
  EXPECT_EQ(api().cuMipmappedArrayCreate(nullptr, &desc, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayCreate(&mipmap, nullptr, 2), CUDA_ERROR_INVALID_VALUE);
  CUDA_ARRAY3D_DESCRIPTOR bad = FloatDescriptor(0, 4, 0);
  EXPECT_EQ(api().cuMipmappedArrayCreate(&mipmap, &bad, 2), CUDA_ERROR_INVALID_VALUE);
  bad = FloatDescriptor(4, 0, 4);
  EXPECT_EQ(api().cuMipmappedArrayCreate(&mipmap, &bad, 2), CUDA_ERROR_INVALID_VALUE);
  bad = FloatDescriptor(4, 4, 0);
  bad.NumChannels = 3;
  EXPECT_EQ(api().cuMipmappedArrayCreate(&mipmap, &bad, 2), CUDA_ERROR_INVALID_VALUE);
  bad = FloatDescriptor(32, 32, 4);
  bad.Flags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST;
  EXPECT_EQ(api().cuMipmappedArrayCreate(&mipmap, &bad, 3), CUDA_ERROR_NOT_SUPPORTED);
}

// A level is an ordinary emulated array for every copy entry point; levels hold their own bytes.
TEST_F(EmulatedDriverTest, MipmappedArrayCopiesThroughLevels) {
  CUDA_ARRAY3D_DESCRIPTOR desc = FloatDescriptor(64, 48, 0);
  CUmipmappedArray mipmap = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 4), CUDA_SUCCESS);
  CUarray level1 = nullptr, level2 = nullptr, level3 = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayGetLevel(&level1, mipmap, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMipmappedArrayGetLevel(&level2, mipmap, 2), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMipmappedArrayGetLevel(&level3, mipmap, 3), CUDA_SUCCESS);

  // Rows of `width` floats between the host and a level, by cuMemcpy3D.
  const auto host_copy = [&](CUarray level, float* host, size_t width, size_t rows, bool to_level) {
    CUDA_MEMCPY3D p{};
    if (to_level) {
      p.srcMemoryType = CU_MEMORYTYPE_HOST;
      p.srcHost = host;
      p.srcPitch = width * sizeof(float);
      p.srcHeight = rows;
      p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
      p.dstArray = level;
    } else {
      p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
      p.srcArray = level;
      p.dstMemoryType = CU_MEMORYTYPE_HOST;
      p.dstHost = host;
      p.dstPitch = width * sizeof(float);
      p.dstHeight = rows;
    }
    p.WidthInBytes = width * sizeof(float);
    p.Height = rows;
    p.Depth = 1;
    return api().cuMemcpy3D(&p);
  };
  // Level 2 (16x12 floats) whole. The 1D array copies reach its first row only, as the H200's driver's do.
  std::vector<float> values(16 * 12), got(16 * 12, -1.0f);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  EXPECT_EQ(api().cuMemcpyHtoA(level2, 0, values.data(), values.size() * sizeof(float)), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(host_copy(level2, values.data(), 16, 12, true), CUDA_SUCCESS);
  ASSERT_EQ(host_copy(level2, got.data(), 16, 12, false), CUDA_SUCCESS);
  EXPECT_EQ(got, values);
  // One row past the level: refused.
  EXPECT_EQ(host_copy(level2, got.data(), 16, 13, false), CUDA_ERROR_INVALID_VALUE);
  // Level 1 is untouched (zero-filled).
  std::vector<float> level1_row(32, -1.0f);
  ASSERT_EQ(host_copy(level1, level1_row.data(), 32, 1, false), CUDA_SUCCESS);
  EXPECT_EQ(level1_row, std::vector<float>(32, 0.0f));

  // Level 2's first 6 rows of 8 into level 3 (8x6) by cuMemcpy3D array to array, then level 3 to the host.
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  copy.srcArray = level2;
  copy.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  copy.dstArray = level3;
  copy.WidthInBytes = 8 * sizeof(float);
  copy.Height = 6;
  copy.Depth = 1;
  ASSERT_EQ(api().cuMemcpy3D(&copy), CUDA_SUCCESS);
  std::vector<float> small(8 * 6, -1.0f);
  CUDA_MEMCPY3D back{};
  back.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  back.srcArray = level3;
  back.dstMemoryType = CU_MEMORYTYPE_HOST;
  back.dstHost = small.data();
  back.dstPitch = 8 * sizeof(float);
  back.dstHeight = 6;
  back.WidthInBytes = 8 * sizeof(float);
  back.Height = 6;
  back.Depth = 1;
  ASSERT_EQ(api().cuMemcpy3D(&back), CUDA_SUCCESS);
  for (size_t row = 0; row < 6; ++row) {
    for (size_t x = 0; x < 8; ++x) EXPECT_EQ(small[row * 8 + x], values[row * 16 + x]) << row << "," << x;
  }
  // A copy that does not fit level 3.
  copy.Height = 7;
  EXPECT_EQ(api().cuMemcpy3D(&copy), CUDA_ERROR_INVALID_VALUE);

  // cuMemcpyAtoA between levels' first rows: level 3's first row into level 1's.
  ASSERT_EQ(api().cuMemcpyAtoA(level1, 0, level3, 0, 8 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemcpyAtoH(level1_row.data(), level1, 0, 8 * sizeof(float)), CUDA_SUCCESS);
  for (size_t x = 0; x < 8; ++x) EXPECT_EQ(level1_row[x], values[x]);
  EXPECT_EQ(api().cuMemcpyAtoA(level1, 0, level3, 0, 9 * sizeof(float)), CUDA_ERROR_INVALID_VALUE);  // past a row
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);
  // The levels went with it.
  EXPECT_EQ(api().cuMemcpyAtoH(got.data(), level2, 0, sizeof(float)), CUDA_ERROR_INVALID_VALUE);
}

// The same level answers the same array; levels die with the mipmapped array only.
TEST_F(EmulatedDriverTest, MipmappedArrayHandles) {
  CUDA_ARRAY3D_DESCRIPTOR desc = FloatDescriptor(64, 48, 0);
  CUmipmappedArray mipmap = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 4), CUDA_SUCCESS);
  CUarray first = nullptr, again = nullptr, level2 = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayGetLevel(&first, mipmap, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMipmappedArrayGetLevel(&again, mipmap, 0), CUDA_SUCCESS);
  EXPECT_EQ(first, again);
  ASSERT_EQ(api().cuMipmappedArrayGetLevel(&level2, mipmap, 2), CUDA_SUCCESS);
  EXPECT_NE(level2, first);
  // Past the last level, no output, unknown handles.
  CUarray none = nullptr;
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&none, mipmap, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&none, mipmap, ~0u), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(nullptr, mipmap, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&none, nullptr, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&none, reinterpret_cast<CUmipmappedArray>(first), 0),
            CUDA_ERROR_INVALID_HANDLE);

  // Destroying a level answers success and destroys nothing (measured: the driver answers 0 and GetLevel still
  // answers the same array).
  EXPECT_EQ(api().cuArrayDestroy(level2), CUDA_SUCCESS);
  EXPECT_EQ(api().cuArrayDestroy(level2), CUDA_SUCCESS);
  CUarray after = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayGetLevel(&after, mipmap, 2), CUDA_SUCCESS);
  EXPECT_EQ(after, level2);
  CUDA_ARRAY3D_DESCRIPTOR d{};
  EXPECT_EQ(api().cuArray3DGetDescriptor(&d, level2), CUDA_SUCCESS);
  EXPECT_EQ(d.Width, 16u);
  EXPECT_EQ(d.Height, 12u);
  EXPECT_EQ(d.Depth, 0u);
  std::vector<float> row(16, 2.5f);  // still a live array: a 2D copy reaches it
  CUDA_MEMCPY3D p{};
  p.srcMemoryType = CU_MEMORYTYPE_HOST;
  p.srcHost = row.data();
  p.srcPitch = row.size() * sizeof(float);
  p.srcHeight = 1;
  p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  p.dstArray = level2;
  p.WidthInBytes = row.size() * sizeof(float);
  p.Height = 1;
  p.Depth = 1;
  EXPECT_EQ(api().cuMemcpy3D(&p), CUDA_SUCCESS);

  // The mipmapped array takes its levels; a second destroy is refused (the real driver crashes).
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuMipmappedArrayDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuMipmappedArrayGetLevel(&none, mipmap, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuArray3DGetDescriptor(&d, first), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuArrayDestroy(level2), CUDA_ERROR_INVALID_HANDLE);
}

// Textures take a live mipmapped array (as the driver does); surfaces refuse one (measured: INVALID_VALUE). A level
// is an array resource like any other.
TEST_F(EmulatedDriverTest, MipmappedArrayTextureObjects) {
  CUDA_ARRAY3D_DESCRIPTOR desc = FloatDescriptor(64, 48, 0);
  CUmipmappedArray mipmap = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 4), CUDA_SUCCESS);
  CUDA_RESOURCE_DESC res{};
  res.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
  res.res.mipmap.hMipmappedArray = mipmap;
  CUDA_TEXTURE_DESC tex{};
  tex.filterMode = CU_TR_FILTER_MODE_LINEAR;
  tex.mipmapFilterMode = CU_TR_FILTER_MODE_LINEAR;
  tex.maxMipmapLevelClamp = 3;
  tex.flags = CU_TRSF_NORMALIZED_COORDINATES;
  CUtexObject texture = 0;
  ASSERT_EQ(api().cuTexObjectCreate(&texture, &res, &tex, nullptr), CUDA_SUCCESS);
  EXPECT_NE(texture, 0u);
  CUsurfObject surface = 0;
  EXPECT_EQ(api().cuSurfObjectCreate(&surface, &res), CUDA_ERROR_INVALID_VALUE);
  // A level as an array resource.
  CUarray level1 = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayGetLevel(&level1, mipmap, 1), CUDA_SUCCESS);
  CUDA_RESOURCE_DESC level_res{};
  level_res.resType = CU_RESOURCE_TYPE_ARRAY;
  level_res.res.array.hArray = level1;
  CUtexObject level_texture = 0;
  ASSERT_EQ(api().cuTexObjectCreate(&level_texture, &level_res, &tex, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(api().cuTexObjectDestroy(level_texture), CUDA_SUCCESS);
  EXPECT_EQ(api().cuTexObjectDestroy(texture), CUDA_SUCCESS);
  // An unknown or destroyed mipmapped array.
  res.res.mipmap.hMipmappedArray = reinterpret_cast<CUmipmappedArray>(level1);
  EXPECT_EQ(api().cuTexObjectCreate(&texture, &res, &tex, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);
  res.res.mipmap.hMipmappedArray = mipmap;
  EXPECT_EQ(api().cuTexObjectCreate(&texture, &res, &tex, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuTexObjectCreate(&texture, &level_res, &tex, nullptr), CUDA_ERROR_INVALID_HANDLE);
}

// The emulation makes no sparse, deferred-mapping or planar array, so these queries refuse every live array with
// what the driver answers for a dense one (measured on the H200 with driver 580: INVALID_VALUE).
TEST_F(EmulatedDriverTest, SparseAndPlanarQueriesRefused) {
  CUDA_ARRAY3D_DESCRIPTOR desc = FloatDescriptor(64, 48, 0);
  CUarray array = nullptr;
  ASSERT_EQ(api().cuArray3DCreate(&array, &desc), CUDA_SUCCESS);
  CUmipmappedArray mipmap = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 4), CUDA_SUCCESS);
  CUarray level0 = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayGetLevel(&level0, mipmap, 0), CUDA_SUCCESS);
  const auto unknown_array = reinterpret_cast<CUarray>(0x1234);
  const auto unknown_mipmap = reinterpret_cast<CUmipmappedArray>(array);

  CUDA_ARRAY_MEMORY_REQUIREMENTS requirements{};
  EXPECT_EQ(api().cuArrayGetMemoryRequirements(&requirements, array, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuArrayGetMemoryRequirements(&requirements, level0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuArrayGetMemoryRequirements(&requirements, unknown_array, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuArrayGetMemoryRequirements(&requirements, array, 9), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().cuArrayGetMemoryRequirements(nullptr, array, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayGetMemoryRequirements(&requirements, mipmap, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayGetMemoryRequirements(&requirements, unknown_mipmap, 0),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuMipmappedArrayGetMemoryRequirements(&requirements, mipmap, -1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(api().cuMipmappedArrayGetMemoryRequirements(nullptr, mipmap, 0), CUDA_ERROR_INVALID_VALUE);

  CUDA_ARRAY_SPARSE_PROPERTIES sparse{};
  EXPECT_EQ(api().cuArrayGetSparseProperties(&sparse, array), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuArrayGetSparseProperties(&sparse, level0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuArrayGetSparseProperties(&sparse, unknown_array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuArrayGetSparseProperties(nullptr, array), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayGetSparseProperties(&sparse, mipmap), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuMipmappedArrayGetSparseProperties(&sparse, unknown_mipmap), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuMipmappedArrayGetSparseProperties(nullptr, mipmap), CUDA_ERROR_INVALID_VALUE);

  CUarray plane = nullptr;
  EXPECT_EQ(api().cuArrayGetPlane(&plane, array, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuArrayGetPlane(&plane, level0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(plane, nullptr);
  EXPECT_EQ(api().cuArrayGetPlane(&plane, unknown_array, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuArrayGetPlane(nullptr, array, 0), CUDA_ERROR_INVALID_VALUE);

  // Sparse and planar arrays cannot be made here.
  CUDA_ARRAY3D_DESCRIPTOR sparse_desc = FloatDescriptor(1024, 1024, 0);
  sparse_desc.Flags = CUDA_ARRAY3D_SPARSE;
  CUarray refused = nullptr;
  EXPECT_EQ(api().cuArray3DCreate(&refused, &sparse_desc), CUDA_ERROR_NOT_SUPPORTED);
  int supported = -1;
  EXPECT_EQ(api().cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(supported, 0);

  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);
  EXPECT_EQ(api().cuArrayDestroy(array), CUDA_SUCCESS);
  EXPECT_EQ(api().cuArrayGetSparseProperties(&sparse, array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(api().cuMipmappedArrayGetSparseProperties(&sparse, mipmap), CUDA_ERROR_INVALID_HANDLE);
}

// cuMemMapArrayAsync (and its _ptsz export): count 0 and a null array are refused (measured: INVALID_VALUE), and
// so is every live array, none being sparse; the stream is checked.
TEST_F(EmulatedDriverTest, MemMapArrayAsyncRefused) {
  CUDA_ARRAY3D_DESCRIPTOR desc = FloatDescriptor(64, 64, 0);
  CUarray array = nullptr;
  ASSERT_EQ(api().cuArray3DCreate(&array, &desc), CUDA_SUCCESS);
  CUmipmappedArray mipmap = nullptr;
  ASSERT_EQ(api().cuMipmappedArrayCreate(&mipmap, &desc, 2), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(api().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

  CUarrayMapInfo info{};
  info.resourceType = CU_RESOURCE_TYPE_ARRAY;
  info.resource.array = array;
  info.subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL;
  info.subresource.sparseLevel.extentWidth = 64;
  info.subresource.sparseLevel.extentHeight = 64;
  info.subresource.sparseLevel.extentDepth = 1;
  info.memOperationType = CU_MEM_OPERATION_TYPE_MAP;
  info.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
  info.deviceBitMask = 1;
  for (auto map : {api().cuMemMapArrayAsync, api().cuMemMapArrayAsync_ptsz}) {
    EXPECT_EQ(map(&info, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(map(nullptr, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(map(&info, 1, nullptr), CUDA_ERROR_INVALID_VALUE);  // dense
    EXPECT_EQ(map(&info, 1, stream), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(map(&info, 1, reinterpret_cast<CUstream>(0xdead)), CUDA_ERROR_INVALID_HANDLE);
    CUarrayMapInfo entry = info;
    entry.resource.array = nullptr;
    EXPECT_EQ(map(&entry, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
    entry.resource.array = reinterpret_cast<CUarray>(0x1234);
    EXPECT_EQ(map(&entry, 1, nullptr), CUDA_ERROR_INVALID_HANDLE);
    entry.resourceType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    entry.resource.mipmap = mipmap;
    EXPECT_EQ(map(&entry, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
    entry.resource.mipmap = nullptr;
    EXPECT_EQ(map(&entry, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
    entry.resourceType = CU_RESOURCE_TYPE_LINEAR;
    EXPECT_EQ(map(&entry, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
  }
  EXPECT_EQ(api().cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);
  EXPECT_EQ(api().cuArrayDestroy(array), CUDA_SUCCESS);
}

// --- Batch memory-operation graph nodes ----------------------------------------

CUstreamBatchMemOpParams WriteValue32(CUdeviceptr address, uint32_t value) {
  CUstreamBatchMemOpParams op{};
  op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = address;
  op.writeValue.value = value;
  return op;
}

CUstreamBatchMemOpParams WriteValue64(CUdeviceptr address, uint64_t value) {
  CUstreamBatchMemOpParams op{};
  op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  op.writeValue.address = address;
  op.writeValue.value64 = value;
  return op;
}

CUstreamBatchMemOpParams WaitValue32(CUdeviceptr address, uint32_t value, unsigned flags) {
  CUstreamBatchMemOpParams op{};
  op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  op.waitValue.address = address;
  op.waitValue.value = value;
  op.waitValue.flags = flags;
  return op;
}

CUDA_BATCH_MEM_OP_NODE_PARAMS BatchParams(std::vector<CUstreamBatchMemOpParams>& ops, CUcontext ctx = nullptr) {
  return {ctx, static_cast<unsigned>(ops.size()), ops.data(), 0};
}

// Launches `exec` on the default stream and answers the first `words` 32-bit words at `address` afterwards.
std::vector<uint32_t> LaunchAndRead(CUgraphExec exec, CUdeviceptr address, size_t words) {
  std::vector<uint32_t> out(words, 0);
  EXPECT_EQ(api().cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemcpyDtoH(out.data(), address, words * 4), CUDA_SUCCESS);
  return out;
}

// A write node, then a wait node depending on it that waits for the written value and writes after it: the launch
// runs both, in order; GetParams answers the node's own copy of the operations and the context.
TEST_F(EmulatedDriverTest, BatchMemOpNodesWriteAndWait) {
  CUdeviceptr p = Alloc(16);
  ASSERT_EQ(api().cuMemsetD32(p, 0, 4), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(api().cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  std::vector<CUstreamBatchMemOpParams> writes = {WriteValue32(p, 7), WriteValue64(p + 8, 0x1122334455667788ull)};
  CUDA_BATCH_MEM_OP_NODE_PARAMS write_params = BatchParams(writes);
  CUgraphNode write_node = nullptr;
  ASSERT_EQ(api().cuGraphAddBatchMemOpNode(&write_node, graph, nullptr, 0, &write_params), CUDA_SUCCESS);
  std::vector<CUstreamBatchMemOpParams> wait_then_write = {WaitValue32(p, 7, CU_STREAM_WAIT_VALUE_EQ),
                                                           WriteValue32(p + 4, 9)};
  CUDA_BATCH_MEM_OP_NODE_PARAMS wait_params = BatchParams(wait_then_write, ctx_);
  CUgraphNode wait_node = nullptr;
  ASSERT_EQ(api().cuGraphAddBatchMemOpNode(&wait_node, graph, &write_node, 1, &wait_params), CUDA_SUCCESS);
  writes[0].writeValue.value = 1000;  // the node copied the array when it was added

  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_EQ(api().cuGraphNodeGetType(write_node, &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  CUDA_BATCH_MEM_OP_NODE_PARAMS answered{};
  ASSERT_EQ(api().cuGraphBatchMemOpNodeGetParams(write_node, &answered), CUDA_SUCCESS);
  EXPECT_EQ(answered.ctx, ctx_);  // null named the current context
  EXPECT_EQ(answered.count, 2u);
  EXPECT_EQ(answered.flags, 0u);
  ASSERT_NE(answered.paramArray, nullptr);
  EXPECT_NE(answered.paramArray, writes.data());
  EXPECT_EQ(answered.paramArray[0].operation, CU_STREAM_MEM_OP_WRITE_VALUE_32);
  EXPECT_EQ(answered.paramArray[0].writeValue.address, p);
  EXPECT_EQ(answered.paramArray[0].writeValue.value, 7u);
  EXPECT_EQ(answered.paramArray[1].operation, CU_STREAM_MEM_OP_WRITE_VALUE_64);
  EXPECT_EQ(answered.paramArray[1].writeValue.value64, 0x1122334455667788ull);
  ASSERT_EQ(api().cuGraphBatchMemOpNodeGetParams(wait_node, &answered), CUDA_SUCCESS);
  EXPECT_EQ(answered.ctx, ctx_);
  ASSERT_EQ(answered.count, 2u);
  EXPECT_EQ(answered.paramArray[0].operation, CU_STREAM_MEM_OP_WAIT_VALUE_32);
  EXPECT_EQ(answered.paramArray[0].waitValue.flags, static_cast<unsigned>(CU_STREAM_WAIT_VALUE_EQ));

  CUgraphExec exec = nullptr;
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  const std::vector<uint32_t> words = LaunchAndRead(exec, p, 4);
  EXPECT_EQ(words[0], 7u);
  EXPECT_EQ(words[1], 9u);
  EXPECT_EQ(words[2], 0x55667788u);
  EXPECT_EQ(words[3], 0x11223344u);
  EXPECT_EQ(api().cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(p), CUDA_SUCCESS);
}

// The emulated device's watchdog (CURELAY_EMU_STREAM_WAIT_LIMIT_MS, for in-process fuzz harnesses): a wait nothing
// satisfies ends with CUDA_ERROR_LAUNCH_TIMEOUT at the next synchronization and poisons its context, so freeing
// memory afterwards (which drains the device) returns. Unset, the same wait holds the stream (the query answers
// NOT_READY) until the value arrives.
TEST_F(EmulatedDriverTest, StreamWaitWatchdogEndsAWaitNothingSatisfies) {
  CUdeviceptr p = Alloc(4);
  ASSERT_EQ(api().cuMemsetD32(p, 0, 1), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  std::vector<CUstreamBatchMemOpParams> wait = {WaitValue32(p, 7, CU_STREAM_WAIT_VALUE_EQ)};

  // Unbounded: the wait is still pending after longer than the bounded case's limit; a write from the host ends it.
  ASSERT_EQ(api().cuStreamBatchMemOp(s, 1, wait.data(), 0), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(api().cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  reinterpret_cast<std::atomic<uint32_t>*>(p)->store(7);  // emulated device memory is this process's memory
  EXPECT_EQ(api().cuStreamSynchronize(s), CUDA_SUCCESS);

  ASSERT_EQ(api().cuMemsetD32(p, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(setenv("CURELAY_EMU_STREAM_WAIT_LIMIT_MS", "100", 1), 0);
  const CUresult enqueued = api().cuStreamBatchMemOp(s, 1, wait.data(), 0);
  unsetenv("CURELAY_EMU_STREAM_WAIT_LIMIT_MS");
  ASSERT_EQ(enqueued, CUDA_SUCCESS);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(api().cuStreamSynchronize(s), CUDA_ERROR_LAUNCH_TIMEOUT);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(api().cuCtxSynchronize(), CUDA_ERROR_LAUNCH_TIMEOUT);  // sticky
  EXPECT_EQ(api().cuMemFree(p), CUDA_ERROR_LAUNCH_TIMEOUT);
  // Destroying the faulted context is the way out (TearDown).
}

// cuGraphAddNode with CU_GRAPH_NODE_TYPE_BATCH_MEM_OP makes the same node.
TEST_F(EmulatedDriverTest, BatchMemOpNodeThroughGraphAddNode) {
  CUdeviceptr p = Alloc(4);
  ASSERT_EQ(api().cuMemsetD32(p, 0, 1), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(api().cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  std::vector<CUstreamBatchMemOpParams> ops = {WriteValue32(p, 21)};
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  params.memOp = {nullptr, 1, ops.data(), 0};
  CUgraphNode node = nullptr;
  ASSERT_EQ(api().cuGraphAddNode(&node, graph, nullptr, nullptr, 0, &params), CUDA_SUCCESS);
  CUDA_BATCH_MEM_OP_NODE_PARAMS answered{};
  ASSERT_EQ(api().cuGraphBatchMemOpNodeGetParams(node, &answered), CUDA_SUCCESS);
  EXPECT_EQ(answered.count, 1u);
  EXPECT_EQ(answered.ctx, ctx_);
  params.memOp.count = 0;  // an empty node is taken, as on the H200
  params.memOp.paramArray = nullptr;
  CUgraphNode empty = nullptr;
  EXPECT_EQ(api().cuGraphAddNode(&empty, graph, nullptr, nullptr, 0, &params), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  EXPECT_EQ(LaunchAndRead(exec, p, 1)[0], 21u);
  EXPECT_EQ(api().cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(p), CUDA_SUCCESS);
}

// The checks of cuStreamBatchMemOp, and GetParams of a node of another type.
TEST_F(EmulatedDriverTest, BatchMemOpNodeValidation) {
  CUdeviceptr p = Alloc(16);
  CUgraph graph = nullptr;
  ASSERT_EQ(api().cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  CUgraphNode node = nullptr;
  std::vector<CUstreamBatchMemOpParams> ops = {WriteValue32(p, 1)};
  CUDA_BATCH_MEM_OP_NODE_PARAMS params = BatchParams(ops);
  EXPECT_EQ(api().cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  params.paramArray = nullptr;
  EXPECT_EQ(api().cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &params), CUDA_ERROR_INVALID_VALUE);
  params = BatchParams(ops);
  params.flags = 1;
  EXPECT_EQ(api().cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &params), CUDA_ERROR_INVALID_VALUE);
  for (const CUstreamBatchMemOpParams& bad : {WriteValue32(p + 2, 1), WriteValue64(p + 4, 1), WriteValue32(0x10, 1),
                                               WriteValue32(p + 16, 1)}) {
    ops = {bad};
    params = BatchParams(ops);
    EXPECT_EQ(api().cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &params), CUDA_ERROR_INVALID_VALUE);
  }
  ops = {WriteValue32(p, 1)};
  ops[0].operation = static_cast<CUstreamBatchMemOpType>(99);
  params = BatchParams(ops);
  EXPECT_EQ(api().cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &params), CUDA_ERROR_INVALID_VALUE);
  size_t count = 0;
  ASSERT_EQ(api().cuGraphGetNodes(graph, nullptr, &count), CUDA_SUCCESS);
  EXPECT_EQ(count, 0u);  // nothing refused was added

  CUgraphNode empty = nullptr;
  ASSERT_EQ(api().cuGraphAddEmptyNode(&empty, graph, nullptr, 0), CUDA_SUCCESS);
  CUDA_BATCH_MEM_OP_NODE_PARAMS answered{};
  EXPECT_EQ(api().cuGraphBatchMemOpNodeGetParams(empty, &answered), CUDA_ERROR_INVALID_VALUE);
  ops = {WriteValue32(p, 1)};
  params = BatchParams(ops);
  EXPECT_EQ(api().cuGraphBatchMemOpNodeSetParams(empty, &params), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(api().cuGraphAddBatchMemOpNode(&node, graph, &empty, 1, &params), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGraphBatchMemOpNodeGetParams(node, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(p), CUDA_SUCCESS);
}

// SetParams copies the new array; the node answers and runs it (in graphs instantiated afterwards).
TEST_F(EmulatedDriverTest, BatchMemOpNodeSetParams) {
  CUdeviceptr p = Alloc(8);
  ASSERT_EQ(api().cuMemsetD32(p, 0, 2), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(api().cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  std::vector<CUstreamBatchMemOpParams> ops = {WriteValue32(p, 1)};
  CUDA_BATCH_MEM_OP_NODE_PARAMS params = BatchParams(ops);
  CUgraphNode node = nullptr;
  ASSERT_EQ(api().cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &params), CUDA_SUCCESS);
  CUgraphExec before = nullptr;
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&before, graph, 0), CUDA_SUCCESS);

  std::vector<CUstreamBatchMemOpParams> changed = {WriteValue32(p, 2), WriteValue32(p + 4, 3)};
  params = BatchParams(changed);
  ASSERT_EQ(api().cuGraphBatchMemOpNodeSetParams(node, &params), CUDA_SUCCESS);
  changed[0].writeValue.value = 1000;  // copied by the call
  CUDA_BATCH_MEM_OP_NODE_PARAMS answered{};
  ASSERT_EQ(api().cuGraphBatchMemOpNodeGetParams(node, &answered), CUDA_SUCCESS);
  ASSERT_EQ(answered.count, 2u);
  EXPECT_EQ(answered.paramArray[0].writeValue.value, 2u);
  EXPECT_EQ(answered.paramArray[1].writeValue.address, p + 4);

  std::vector<uint32_t> words = LaunchAndRead(before, p, 2);  // instantiated earlier: the old parameters
  EXPECT_EQ(words[0], 1u);
  EXPECT_EQ(words[1], 0u);
  CUgraphExec after = nullptr;
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&after, graph, 0), CUDA_SUCCESS);
  words = LaunchAndRead(after, p, 2);
  EXPECT_EQ(words[0], 2u);
  EXPECT_EQ(words[1], 3u);
  EXPECT_EQ(api().cuGraphExecDestroy(before), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGraphExecDestroy(after), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(p), CUDA_SUCCESS);
}

// ExecSetParams changes addresses and values in the executable graph only; the number and types of the operations
// (and the context) are fixed.
TEST_F(EmulatedDriverTest, BatchMemOpExecNodeSetParams) {
  CUdeviceptr p = Alloc(8);
  ASSERT_EQ(api().cuMemsetD32(p, 0, 2), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(api().cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  std::vector<CUstreamBatchMemOpParams> ops = {WriteValue32(p, 1)};
  CUDA_BATCH_MEM_OP_NODE_PARAMS params = BatchParams(ops);
  CUgraphNode node = nullptr;
  ASSERT_EQ(api().cuGraphAddBatchMemOpNode(&node, graph, nullptr, 0, &params), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);

  std::vector<CUstreamBatchMemOpParams> moved = {WriteValue32(p + 4, 5)};
  params = BatchParams(moved, ctx_);
  ASSERT_EQ(api().cuGraphExecBatchMemOpNodeSetParams(exec, node, &params), CUDA_SUCCESS);
  CUDA_BATCH_MEM_OP_NODE_PARAMS answered{};
  ASSERT_EQ(api().cuGraphBatchMemOpNodeGetParams(node, &answered), CUDA_SUCCESS);
  ASSERT_EQ(answered.count, 1u);
  EXPECT_EQ(answered.paramArray[0].writeValue.address, p);  // the graph's node is unchanged
  EXPECT_EQ(answered.paramArray[0].writeValue.value, 1u);

  std::vector<CUstreamBatchMemOpParams> two = {WriteValue32(p, 6), WriteValue32(p, 7)};
  params = BatchParams(two);
  EXPECT_EQ(api().cuGraphExecBatchMemOpNodeSetParams(exec, node, &params), CUDA_ERROR_INVALID_VALUE);
  std::vector<CUstreamBatchMemOpParams> wider = {WriteValue64(p, 8)};
  params = BatchParams(wider);
  EXPECT_EQ(api().cuGraphExecBatchMemOpNodeSetParams(exec, node, &params), CUDA_ERROR_INVALID_VALUE);
  std::vector<CUstreamBatchMemOpParams> none;
  params = BatchParams(none);
  EXPECT_EQ(api().cuGraphExecBatchMemOpNodeSetParams(exec, node, &params), CUDA_ERROR_INVALID_VALUE);

  std::vector<uint32_t> words = LaunchAndRead(exec, p, 2);  // the accepted change, not the refused ones
  EXPECT_EQ(words[0], 0u);
  EXPECT_EQ(words[1], 5u);
  CUgraphExec fresh = nullptr;
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&fresh, graph, 0), CUDA_SUCCESS);
  words = LaunchAndRead(fresh, p, 2);
  EXPECT_EQ(words[0], 1u);
  EXPECT_EQ(api().cuGraphExecDestroy(fresh), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(p), CUDA_SUCCESS);
}

// A captured cuStreamBatchMemOp is a batch memory-operation node that answers its operations; it runs at launch.
TEST_F(EmulatedDriverTest, CapturedBatchMemOpNodeAnswersItsOperations) {
  CUdeviceptr p = Alloc(8);
  ASSERT_EQ(api().cuMemsetD32(p, 0, 2), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(api().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  std::vector<CUstreamBatchMemOpParams> ops = {WriteValue32(p, 11), WaitValue32(p, 11, CU_STREAM_WAIT_VALUE_GEQ),
                                               WriteValue32(p + 4, 12)};
  ASSERT_EQ(api().cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamBatchMemOp(stream, static_cast<unsigned>(ops.size()), ops.data(), 0), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(api().cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);

  CUgraphNode node = nullptr;
  size_t count = 1;
  ASSERT_EQ(api().cuGraphGetNodes(graph, &node, &count), CUDA_SUCCESS);
  ASSERT_EQ(count, 1u);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_EQ(api().cuGraphNodeGetType(node, &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  CUDA_BATCH_MEM_OP_NODE_PARAMS answered{};
  ASSERT_EQ(api().cuGraphBatchMemOpNodeGetParams(node, &answered), CUDA_SUCCESS);
  EXPECT_EQ(answered.ctx, ctx_);
  EXPECT_EQ(answered.flags, 0u);
  ASSERT_EQ(answered.count, 3u);
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(answered.paramArray[i].operation, ops[i].operation) << i;
    EXPECT_EQ(answered.paramArray[i].writeValue.address, ops[i].writeValue.address) << i;
    EXPECT_EQ(answered.paramArray[i].writeValue.value, ops[i].writeValue.value) << i;
  }
  EXPECT_EQ(answered.paramArray[1].waitValue.flags, static_cast<unsigned>(CU_STREAM_WAIT_VALUE_GEQ));

  uint32_t untouched = 1;
  ASSERT_EQ(api().cuMemcpyDtoH(&untouched, p, 4), CUDA_SUCCESS);
  EXPECT_EQ(untouched, 0u);  // captured, not run
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api().cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  const std::vector<uint32_t> words = LaunchAndRead(exec, p, 2);
  EXPECT_EQ(words[0], 11u);
  EXPECT_EQ(words[1], 12u);
  EXPECT_EQ(api().cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(api().cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(api().cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(p), CUDA_SUCCESS);
}

}  // namespace
