// Device and context queries, GPUDirect RDMA flushes and coredump settings, answered as the real driver on Linux
// answers them for an emulated H200: no execution affinity (contexts use every SM), no native atomics with the host
// (CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED is 0) but every integer and float atomic between devices (one
// host memory), no LUID and no NvSciSync (Windows and Tegra features: CUDA_ERROR_NOT_SUPPORTED), nothing to flush
// (writes are visible at once), and the deprecated profiler initialization refused as the CUDA 12+ driver refuses
// it. Coredump settings are remembered per context and globally; no coredump is ever written.
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "api_common.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

constexpr unsigned int kAllIntegerCapabilities = CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED |
                                                 CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_SCALAR_32 |
                                                 CU_ATOMIC_CAPABILITY_SCALAR_64;
constexpr unsigned int kFloatCapabilities =
    CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_SCALAR_32 |
    CU_ATOMIC_CAPABILITY_SCALAR_64;

CUresult AtomicCapabilities(unsigned int* capabilities, const CUatomicOperation* operations, unsigned int count,
                            bool native) {
  if (capabilities == nullptr || operations == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < count; ++i) {
    if (operations[i] < 0 || operations[i] >= CU_ATOMIC_OPERATION_MAX) return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned int i = 0; i < count; ++i) {
    const bool floating = operations[i] >= CU_ATOMIC_OPERATION_FLOAT_ADD;
    capabilities[i] = !native ? 0 : floating ? kFloatCapabilities : kAllIntegerCapabilities;
  }
  return CUDA_SUCCESS;
}

// A coredump setting's value: an int or bool (as 4 bytes), or a path.
struct CoredumpSettings {
  std::map<int, std::string> values;  // the bytes set, by CUcoredumpSettings
};

std::mutex coredump_mu;
CoredumpSettings global_coredump;                       // guarded by coredump_mu
std::map<uint64_t, CoredumpSettings> context_coredump;  // by context handle; guarded by coredump_mu

bool PathSetting(CUcoredumpSettings attribute) {
  return attribute == CU_COREDUMP_FILE || attribute == CU_COREDUMP_PIPE;
}

// The driver's defaults: everything off, flags 0, paths named after the host and process.
std::string DefaultSetting(CUcoredumpSettings attribute) {
  if (attribute == CU_COREDUMP_FILE) return "core.cuda.emulated";
  if (attribute == CU_COREDUMP_PIPE) return "corepipe.cuda.emulated";
  return std::string(sizeof(int), '\0');
}

CUresult CoredumpAccess(CUcoredumpSettings attribute, void* value, size_t* size, bool global, bool set) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (attribute < CU_COREDUMP_ENABLE_ON_EXCEPTION || attribute >= CU_COREDUMP_MAX || value == nullptr ||
      size == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t context = 0;
  if (!global) {
    std::shared_ptr<Context> current;
    if (CUresult r = CurrentContext(&current); r != CUDA_SUCCESS) return r;
    context = current->handle;
  }
  std::lock_guard lock(coredump_mu);
  CoredumpSettings& settings = global ? global_coredump : context_coredump[context];
  if (set) {
    if (PathSetting(attribute)) {
      const size_t length = strnlen(static_cast<const char*>(value), *size);
      if (length == *size || length > 1023) return CUDA_ERROR_INVALID_VALUE;  // a string of up to 1023 characters
      settings.values[attribute] = std::string(static_cast<const char*>(value), length);
    } else {
      if (*size < sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
      settings.values[attribute] = std::string(static_cast<const char*>(value), sizeof(int));
    }
    return CUDA_SUCCESS;
  }
  std::string current = DefaultSetting(attribute);
  if (const auto own = settings.values.find(attribute); own != settings.values.end()) {
    current = own->second;
  } else if (const auto inherited = global_coredump.values.find(attribute);
             !global && inherited != global_coredump.values.end()) {
    current = inherited->second;  // a context without its own setting has the global one
  }
  const size_t needed = PathSetting(attribute) ? current.size() + 1 : sizeof(int);
  if (*size < needed) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(value, current.data(), current.size());
  if (PathSetting(attribute)) static_cast<char*>(value)[current.size()] = '\0';
  *size = needed;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuDeviceGetExecAffinitySupport(int* pi, CUexecAffinityType type, CUdevice dev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (pi == nullptr || type < 0 || type >= CU_EXEC_AFFINITY_TYPE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  *pi = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetExecAffinity(CUexecAffinityParam* pExecAffinity, CUexecAffinityType type) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (pExecAffinity == nullptr || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_INVALID_VALUE;
    int sm_count = 0;
    if (CUresult r = cuDeviceGetAttribute(&sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->device);
        r != CUDA_SUCCESS) {
      return r;
    }
    pExecAffinity->type = type;
    pExecAffinity->param.smCount.val = static_cast<unsigned int>(sm_count);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetHostAtomicCapabilities(unsigned int* capabilities, const CUatomicOperation* operations,
                                                   unsigned int count, CUdevice dev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  return emu::AtomicCapabilities(capabilities, operations, count, false);
}

CUresult CUDAAPI cuDeviceGetP2PAtomicCapabilities(unsigned int* capabilities, const CUatomicOperation* operations,
                                                  unsigned int count, CUdevice srcDevice, CUdevice dstDevice) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (CUresult r = emu::Driver::Get().CheckDevice(srcDevice); r != CUDA_SUCCESS) return r;
  if (CUresult r = emu::Driver::Get().CheckDevice(dstDevice); r != CUDA_SUCCESS) return r;
  if (srcDevice == dstDevice) return CUDA_ERROR_INVALID_DEVICE;
  return emu::AtomicCapabilities(capabilities, operations, count, true);
}

CUresult CUDAAPI cuDeviceGetLuid(char* luid, unsigned int* deviceNodeMask, CUdevice dev) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (luid == nullptr || deviceNodeMask == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuDeviceGetNvSciSyncAttributes(void* nvSciSyncAttrList, CUdevice dev, int flags) {
  (void)nvSciSyncAttrList;
  (void)flags;
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (CUresult r = emu::Driver::Get().CheckDevice(dev); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                           CUflushGPUDirectRDMAWritesScope scope) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX) return CUDA_ERROR_INVALID_VALUE;
    if (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER && scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuProfilerInitialize(const char* configFile, const char* outputFile, CUoutput_mode outputMode) {
  (void)configFile;
  (void)outputFile;
  (void)outputMode;
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuCoredumpGetAttribute(CUcoredumpSettings attrib, void* value, size_t* size) {
  return emu::Guard([&] { return emu::CoredumpAccess(attrib, value, size, false, false); });
}
CUresult CUDAAPI cuCoredumpGetAttributeGlobal(CUcoredumpSettings attrib, void* value, size_t* size) {
  return emu::Guard([&] { return emu::CoredumpAccess(attrib, value, size, true, false); });
}
CUresult CUDAAPI cuCoredumpSetAttribute(CUcoredumpSettings attrib, void* value, size_t* size) {
  return emu::Guard([&] { return emu::CoredumpAccess(attrib, value, size, false, true); });
}
CUresult CUDAAPI cuCoredumpSetAttributeGlobal(CUcoredumpSettings attrib, void* value, size_t* size) {
  return emu::Guard([&] { return emu::CoredumpAccess(attrib, value, size, true, true); });
}

}  // extern "C"
