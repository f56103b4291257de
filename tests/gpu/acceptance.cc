// curelay GPU acceptance test: one program, run twice on the GPU host (natively and through curelay).
//
// Usage: curelay_gpu_acceptance <kernels.ptx> <kernels.cubin> <kernels.fatbin>
//
// Every case prints exactly one line `CASE <name> <value>`, where value is deterministic for a given
// GPU and driver (a count, a short readable record, or an FNV-1a 64 digest of the bytes that came
// back), so tests/gpu/run.sh can compare the native and the curelay run line by line. A case that
// hits an unexpected driver error prints `CASE <name> error:<CUDA_ERROR_...>` (details on stderr) and
// the program moves on. Lines that do not start with `CASE ` (e.g. `INFO libcuda <path>`) are not
// compared. The exit code is 0 once every case ran; results are judged outside.
//
// Driver API only (no CUDA runtime); the kernels come from tests/kernels/test_kernels.cu.

#include "driver_check.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using curelay_gpu::DriverError;
using curelay_gpu::error_name;

// ---------------------------------------------------------------------------------------------
// Deterministic data and digests

class Fnv1a {
 public:
  void add(const void* data, size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) {
      hash_ ^= bytes[i];
      hash_ *= 0x100000001b3ULL;
    }
  }
  template <typename T>
  void add_value(const T& value) {
    add(&value, sizeof value);
  }
  void add_string(const std::string& s) { add(s.data(), s.size() + 1); }  // includes a separator
  uint64_t value() const { return hash_; }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash_));
    return buf;
  }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

std::string digest(const void* data, size_t size) {
  Fnv1a f;
  f.add(data, size);
  return f.hex();
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void fill_pseudo_random(void* data, size_t size, uint64_t seed) {
  auto* out = static_cast<unsigned char*>(data);
  uint64_t state = seed;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t word = splitmix64(state);
    std::memcpy(out + i, &word, 8);
  }
  if (i < size) {
    const uint64_t word = splitmix64(state);
    std::memcpy(out + i, &word, size - i);
  }
}

std::string hex_u64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string code_str(CUresult r) { return std::to_string(static_cast<int>(r)); }

// Values must be one token-friendly string: spaces become underscores.
std::string sanitize(std::string s) {
  for (char& c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') c = '_';
  }
  return s;
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------------------------------------
// RAII wrappers; destructors ignore errors (after the sticky fault everything fails).

template <typename T, typename Destroy>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T h) : h_(h) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  Handle& operator=(Handle&& o) noexcept {
    reset();
    h_ = std::exchange(o.h_, T{});
    return *this;
  }
  ~Handle() { reset(); }
  void reset() {
    if (h_) Destroy{}(h_);
    h_ = T{};
  }
  T get() const { return h_; }
  T* out() {
    reset();
    return &h_;
  }
  T release() { return std::exchange(h_, T{}); }

 private:
  T h_{};
};

struct FreeDevice {
  void operator()(CUdeviceptr p) const { (void)cuMemFree(p); }
};
struct FreeHost {
  void operator()(void* p) const { (void)cuMemFreeHost(p); }
};
struct DestroyStream {
  void operator()(CUstream s) const { (void)cuStreamDestroy(s); }
};
struct DestroyEvent {
  void operator()(CUevent e) const { (void)cuEventDestroy(e); }
};
struct UnloadModule {
  void operator()(CUmodule m) const { (void)cuModuleUnload(m); }
};
struct UnloadLibrary {
  void operator()(CUlibrary l) const { (void)cuLibraryUnload(l); }
};

using DeviceMemory = Handle<CUdeviceptr, FreeDevice>;
using PinnedMemory = Handle<void*, FreeHost>;
using Stream = Handle<CUstream, DestroyStream>;
using Event = Handle<CUevent, DestroyEvent>;
using Module = Handle<CUmodule, UnloadModule>;
using Library = Handle<CUlibrary, UnloadLibrary>;

struct DestroyGraph {
  void operator()(CUgraph g) const { (void)cuGraphDestroy(g); }
};
struct DestroyGraphExec {
  void operator()(CUgraphExec e) const { (void)cuGraphExecDestroy(e); }
};
using Graph = Handle<CUgraph, DestroyGraph>;
using GraphExec = Handle<CUgraphExec, DestroyGraphExec>;

DeviceMemory device_alloc(size_t size) {
  DeviceMemory m;
  CU_CHECK(cuMemAlloc(m.out(), size));
  return m;
}

PinnedMemory pinned_alloc(size_t size) {
  PinnedMemory m;
  CU_CHECK(cuMemAllocHost(m.out(), size));
  return m;
}

Stream make_stream(unsigned flags = CU_STREAM_NON_BLOCKING, int priority = 0) {
  Stream s;
  CU_CHECK(cuStreamCreateWithPriority(s.out(), flags, priority));
  return s;
}

Event make_event(unsigned flags = CU_EVENT_DEFAULT) {
  Event e;
  CU_CHECK(cuEventCreate(e.out(), flags));
  return e;
}

// Launches f with the kernel arguments passed by value in `args` (their types must match the
// kernel's parameters exactly). Returns the launch's CUresult so the caller wraps it in CU_CHECK.
template <typename... Args>
CUresult launch(CUfunction f, unsigned grid, unsigned block, CUstream stream, Args... args) {
  if constexpr (sizeof...(Args) == 0) {
    return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, nullptr, nullptr);
  } else {
    void* params[] = {static_cast<void*>(&args)...};
    return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, params, nullptr);
  }
}

unsigned blocks_for(unsigned long long n, unsigned block) {
  return static_cast<unsigned>((n + block - 1) / block);
}

// ---------------------------------------------------------------------------------------------
// Shared state built up by the early cases.

struct ProbeStruct {
  char c;
  double d;
  int i[3];
};
static_assert(sizeof(ProbeStruct) == 32 && alignof(ProbeStruct) == 8, "must match the device layout");

struct State {
  std::string ptx_path, cubin_path, fatbin_path;
  bool initialized = false;
  CUdevice device = -1;
  CUcontext primary = nullptr;
  Module module;  // main module (from PTX) used by the later cases

  void require_context() const {
    if (!initialized || primary == nullptr) throw std::runtime_error("no_context");
  }
  CUfunction function(const char* name) const {
    require_context();
    if (!module.get()) throw std::runtime_error("no_module");
    CUfunction f = nullptr;
    CU_CHECK(cuModuleGetFunction(&f, module.get(), name));
    return f;
  }
};

State g;

void run_case(const std::string& name, const std::function<std::string()>& body) {
  std::string value;
  try {
    value = body();
  } catch (const DriverError& e) {
    value = "error:" + error_name(e.code());
  } catch (const std::exception& e) {
    value = "exception:" + sanitize(e.what());
  }
  std::printf("CASE %s %s\n", name.c_str(), value.c_str());
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// Device enumeration and contexts

std::string case_init() {
  CU_CHECK(cuInit(0));
  g.initialized = true;
  CU_CHECK(cuDeviceGet(&g.device, 0));
  return "ok";
}

std::string case_driver_version() {
  int version = 0;
  CU_CHECK(cuDriverGetVersion(&version));
  return std::to_string(version);
}

std::string case_device_count() {
  int count = 0;
  CU_CHECK(cuDeviceGetCount(&count));
  return std::to_string(count);
}

std::string case_device_name() {
  char name[256] = {};
  CU_CHECK(cuDeviceGetName(name, sizeof name, g.device));
  return sanitize(name);
}

std::string case_device_total_mem() {
  size_t bytes = 0;
  CU_CHECK(cuDeviceTotalMem(&bytes, g.device));
  return std::to_string(bytes);
}

std::string case_device_attributes() {
  static constexpr std::pair<const char*, CUdevice_attribute> kAttributes[] = {
      {"cc_major", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
      {"cc_minor", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
      {"sms", CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {"max_threads_per_block", CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
      {"max_block_x", CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X},
      {"max_grid_x", CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X},
      {"warp", CU_DEVICE_ATTRIBUTE_WARP_SIZE},
      {"smem_per_block", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},
      {"smem_optin", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
      {"regs_per_block", CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK},
      {"l2", CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE},
      {"bus_width", CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH},
      {"uva", CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING},
      {"concurrent_kernels", CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS},
      {"async_engines", CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT},
      {"pci_bus", CU_DEVICE_ATTRIBUTE_PCI_BUS_ID},
      {"compute_mode", CU_DEVICE_ATTRIBUTE_COMPUTE_MODE},
  };
  std::string out;
  for (const auto& [label, attribute] : kAttributes) {
    int value = 0;
    CU_CHECK(cuDeviceGetAttribute(&value, attribute, g.device));
    if (!out.empty()) out += ',';
    out += std::string(label) + "=" + std::to_string(value);
  }
  return out;
}

std::string case_device_uuid() {
  CUuuid uuid{};
  CU_CHECK(cuDeviceGetUuid(&uuid, g.device));
  std::string out;
  char buf[3];
  for (char b : uuid.bytes) {
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned char>(b));
    out += buf;
  }
  char pci[64] = {};
  CU_CHECK(cuDeviceGetPCIBusId(pci, sizeof pci, g.device));
  return out + " pci=" + sanitize(pci);
}

std::string case_primary_ctx() {
  unsigned flags_before = 0, flags_after = 0;
  int active_before = 0, active_after = 0;
  CU_CHECK(cuDevicePrimaryCtxGetState(g.device, &flags_before, &active_before));
  CUcontext primary = nullptr;
  CU_CHECK(cuDevicePrimaryCtxRetain(&primary, g.device));
  CU_CHECK(cuDevicePrimaryCtxGetState(g.device, &flags_after, &active_after));
  CU_CHECK(cuCtxSetCurrent(primary));
  g.primary = primary;
  CUcontext current = nullptr;
  CU_CHECK(cuCtxGetCurrent(&current));
  CUdevice device = -1;
  CU_CHECK(cuCtxGetDevice(&device));
  unsigned api_version = 0;
  CU_CHECK(cuCtxGetApiVersion(primary, &api_version));
  std::ostringstream out;
  out << "before=" << flags_before << "/" << active_before << " after=" << flags_after << "/" << active_after
      << " current_is_primary=" << (current == primary) << " device=" << device << " api=" << api_version;
  return out.str();
}

std::string case_ctx_create_push_pop() {
  g.require_context();
  auto label = [](CUcontext c, CUcontext created) -> std::string {
    if (c == nullptr) return "null";
    if (c == g.primary) return "primary";
    if (c == created) return "created";
    return "other";
  };
  CUcontext created = nullptr;
  CU_CHECK(cuCtxCreate(&created, nullptr, 0, g.device));
  std::string trace;
  CUcontext c = nullptr;
  CU_CHECK(cuCtxGetCurrent(&c));
  trace += "create:" + label(c, created);
  unsigned flags = 0;
  CU_CHECK(cuCtxGetFlags(&flags));
  trace += " flags:" + std::to_string(flags);
  CUcontext popped = nullptr;
  CU_CHECK(cuCtxPopCurrent(&popped));
  CU_CHECK(cuCtxGetCurrent(&c));
  trace += " pop:" + label(popped, created) + "->" + label(c, created);
  CU_CHECK(cuCtxPushCurrent(created));
  CU_CHECK(cuCtxGetCurrent(&c));
  trace += " push:" + label(c, created);
  // Work in the created context: a small allocation and memset round trip.
  DeviceMemory m = device_alloc(64);
  CU_CHECK(cuMemsetD32(m.get(), 0xA5A5A5A5u, 16));
  std::array<unsigned, 16> host{};
  CU_CHECK(cuMemcpyDtoH(host.data(), m.get(), sizeof host));
  trace += " work:" + std::string(std::all_of(host.begin(), host.end(), [](unsigned v) { return v == 0xA5A5A5A5u; })
                                      ? "ok"
                                      : "bad");
  m.reset();
  CU_CHECK(cuCtxPopCurrent(&popped));
  CU_CHECK(cuCtxGetCurrent(&c));
  trace += " pop:" + label(popped, created) + "->" + label(c, created);
  CU_CHECK(cuCtxDestroy(created));
  CU_CHECK(cuCtxGetCurrent(&c));
  trace += " destroy:" + label(c, created);
  CU_CHECK(cuCtxSetCurrent(g.primary));
  return trace;
}

// ---------------------------------------------------------------------------------------------
// Modules and kernels

// Runs vector_add from `f` on n elements with the given block size; returns "ok <digest>" or
// "mismatch@<index> <digest>".
std::string run_vector_add(CUfunction f, int n, unsigned block) {
  std::vector<float> a(n), b(n), c(n, -1.0f), expect(n);
  uint64_t state = 0x5eed0000ULL + static_cast<uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.25f;
    b[i] = static_cast<float>(splitmix64(state) >> 40) / 16777216.0f;
    expect[i] = a[i] + b[i];
  }
  const size_t bytes = sizeof(float) * static_cast<size_t>(n);
  DeviceMemory da = device_alloc(bytes), db = device_alloc(bytes), dc = device_alloc(bytes);
  CU_CHECK(cuMemcpyHtoD(da.get(), a.data(), bytes));
  CU_CHECK(cuMemcpyHtoD(db.get(), b.data(), bytes));
  CU_CHECK(cuMemsetD8(dc.get(), 0xFF, bytes));
  CU_CHECK(launch(f, blocks_for(n, block), block, nullptr, da.get(), db.get(), dc.get(), n));
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(c.data(), dc.get(), bytes));
  const std::string d = digest(c.data(), bytes);
  for (int i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(c[i]) != std::bit_cast<uint32_t>(expect[i])) {
      return "mismatch@" + std::to_string(i) + " " + d;
    }
  }
  return "ok " + d;
}

std::string module_check(CUmodule module) {
  CUfunction f = nullptr;
  CU_CHECK(cuModuleGetFunction(&f, module, "vector_add"));
  int max_threads = 0;
  CU_CHECK(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  return run_vector_add(f, 4099, 128) + " max_threads=" + std::to_string(max_threads);
}

std::string case_module_ptx() {
  g.require_context();
  std::vector<char> ptx = read_file(g.ptx_path);
  ptx.push_back('\0');
  Module m;
  CU_CHECK(cuModuleLoadData(m.out(), ptx.data()));
  const std::string result = module_check(m.get());
  g.module = std::move(m);  // the main module of the later cases
  return result;
}

std::string case_module_ptx_jit_options() {
  g.require_context();
  std::vector<char> ptx = read_file(g.ptx_path);
  ptx.push_back('\0');
  CUjit_option options[] = {CU_JIT_OPTIMIZATION_LEVEL, CU_JIT_MAX_REGISTERS};
  void* values[] = {reinterpret_cast<void*>(uintptr_t{3}), reinterpret_cast<void*>(uintptr_t{64})};
  Module m;
  CU_CHECK(cuModuleLoadDataEx(m.out(), ptx.data(), 2, options, values));
  return module_check(m.get());
}

std::string case_module_cubin_file() {
  g.require_context();
  Module m;
  CU_CHECK(cuModuleLoad(m.out(), g.cubin_path.c_str()));
  return module_check(m.get());
}

std::string case_module_cubin_data() {
  g.require_context();
  const std::vector<char> cubin = read_file(g.cubin_path);
  Module m;
  CU_CHECK(cuModuleLoadData(m.out(), cubin.data()));
  return module_check(m.get());
}

std::string case_module_fatbin() {
  g.require_context();
  const std::vector<char> fatbin = read_file(g.fatbin_path);
  Module m;
  CU_CHECK(cuModuleLoadFatBinary(m.out(), fatbin.data()));
  return module_check(m.get());
}

std::string case_library_fatbin() {
  g.require_context();
  const std::vector<char> fatbin = read_file(g.fatbin_path);
  Library lib;
  CU_CHECK(cuLibraryLoadData(lib.out(), fatbin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel kernel = nullptr;
  CU_CHECK(cuLibraryGetKernel(&kernel, lib.get(), "vector_add"));
  CUfunction f = nullptr;
  CU_CHECK(cuKernelGetFunction(&f, kernel));
  CUdeviceptr counter = 0;
  size_t bytes = 0;
  CU_CHECK(cuLibraryGetGlobal(&counter, &bytes, lib.get(), "global_counter"));
  return run_vector_add(f, 777, 64) + " global_bytes=" + std::to_string(bytes);
}

// Application memory registered for the device (not page-aligned): a kernel writes it through its device address,
// the application's bytes outside the range stay, and it is the application's again after unregistering.
std::string case_host_register() {
  CUfunction fill = g.function("fill_u32");
  const size_t page = 4096, n = 3 * page / 4;
  std::vector<unsigned char> backing(5 * page);
  for (size_t i = 0; i < backing.size(); ++i) backing[i] = static_cast<unsigned char>(i * 7 + 1);
  auto* words = reinterpret_cast<unsigned int*>(backing.data() + 2 * 64);
  CU_CHECK(cuMemHostRegister(words, n * 4, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
  const CUresult again = cuMemHostRegister(words + 4, 64, 0);
  CUdeviceptr device = 0;
  CU_CHECK(cuMemHostGetDevicePointer(&device, words, 0));
  CU_CHECK(launch(fill, static_cast<unsigned>((n + 255) / 256), 256, nullptr, device, 0xa5a5f00du,
                  static_cast<unsigned long long>(n)));
  CU_CHECK(cuCtxSynchronize());
  Fnv1a f;
  f.add(backing.data(), backing.size());
  CU_CHECK(cuMemHostUnregister(words));
  const CUresult twice = cuMemHostUnregister(words);
  words[0] = 42;
  return "again=" + code_str(again) + " twice=" + code_str(twice) + " first=" + std::to_string(words[0]) + " " +
         f.hex();
}

// How many bytes cuPointerGetAttribute writes for each attribute (the most of two fills that any byte changed),
// or its error: an application's variable is exactly as big as the driver writes, so the shim must write no more.
std::string pointer_attribute_widths(CUdeviceptr ptr, std::initializer_list<int> attributes) {
  std::string out;
  for (const int attribute : attributes) {
    size_t width = 0;
    CUresult result = CUDA_SUCCESS;
    for (const unsigned char fill : {0xa5, 0x5a}) {
      unsigned char slot[32];
      std::memset(slot, fill, sizeof slot);
      result = cuPointerGetAttribute(slot, static_cast<CUpointer_attribute>(attribute), ptr);
      size_t written = sizeof slot;
      while (written > 0 && slot[written - 1] == fill) --written;
      width = std::max(width, written);
    }
    if (!out.empty()) out += ',';
    out += std::to_string(attribute) + ":" + (result == CUDA_SUCCESS ? std::to_string(width) : code_str(result));
  }
  return out;
}

std::string case_pointer_attribute_widths() {
  g.require_context();
  DeviceMemory device = device_alloc(4096);
  CUmemoryPool pool = nullptr;
  CU_CHECK(cuDeviceGetDefaultMemPool(&pool, g.device));
  CUdeviceptr pooled = 0;
  CU_CHECK(cuMemAllocFromPoolAsync(&pooled, 4096, pool, nullptr));
  CU_CHECK(cuStreamSynchronize(nullptr));
  // Every attribute but P2P tokens (5, nv-p2p.h's) for device memory; pinned host memory for the attributes the
  // shim describes itself (docs/api-coverage.md).
  const std::string all = pointer_attribute_widths(
      device.get() + 64, {1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21});
  const std::string from_pool = pointer_attribute_widths(pooled, {1, 2, 3, 8, 9, 11, 12, 17});
  CU_CHECK(cuMemFreeAsync(pooled, nullptr));
  CU_CHECK(cuStreamSynchronize(nullptr));
  void* host = nullptr;
  CU_CHECK(cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  const std::string pinned =
      pointer_attribute_widths(reinterpret_cast<CUdeviceptr>(host) + 64, {1, 2, 3, 4, 8, 9, 11, 12, 13});
  CU_CHECK(cuMemFreeHost(host));
  return "device=" + all + " pool=" + from_pool + " pinned=" + pinned;
}

std::string hex_bytes(const void* data, size_t count) {
  std::string out;
  char digits[3];
  for (size_t i = 0; i < count; ++i) {
    std::snprintf(digits, sizeof digits, "%02x", static_cast<const unsigned char*>(data)[i]);
    out += digits;
  }
  return out;
}

// JIT linking: the test kernels' PTX added as data and again as a file to two links, each completed into a cubin
// that loads and runs; the link's info log and wall time come back through the options; a bad input is refused.
std::string case_link_ptx() {
  g.require_context();
  std::vector<char> ptx = read_file(g.ptx_path);
  ptx.push_back('\0');
  std::string out;
  for (const bool from_file : {false, true}) {
    char info[4096] = {};
    CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME,
                              CU_JIT_LOG_VERBOSE};
    void* values[] = {info, reinterpret_cast<void*>(sizeof info), nullptr, reinterpret_cast<void*>(1)};
    CUlinkState link = nullptr;
    CU_CHECK(cuLinkCreate(4, options, values, &link));
    if (from_file) {
      CU_CHECK(cuLinkAddFile(link, CU_JIT_INPUT_PTX, g.ptx_path.c_str(), 0, nullptr, nullptr));
    } else {
      CU_CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, ptx.data(), ptx.size(), "kernels.ptx", 0, nullptr, nullptr));
    }
    const char garbage[] = "not an object";
    const CUresult bad = cuLinkAddData(link, CU_JIT_INPUT_OBJECT, const_cast<char*>(garbage), sizeof garbage,
                                       "garbage", 0, nullptr, nullptr);
    void* cubin = nullptr;
    size_t cubin_bytes = 0;
    const CUresult complete = cuLinkComplete(link, &cubin, &cubin_bytes);
    const std::string magic = complete == CUDA_SUCCESS && cubin_bytes >= 4 ? hex_bytes(cubin, 4) : "-";
    std::string ran = "-";
    if (complete == CUDA_SUCCESS) {
      Module m;
      CU_CHECK(cuModuleLoadData(m.out(), cubin));
      CUfunction add = nullptr;
      CU_CHECK(cuModuleGetFunction(&add, m.get(), "vector_add"));
      ran = run_vector_add(add, 123, 16);
    }
    CU_CHECK(cuLinkDestroy(link));
    out += std::string(from_file ? " file:" : "data:") + " bad=" + code_str(bad) + " complete=" + code_str(complete) +
           " magic=" + magic + " ran=" + ran +
           " info_log=" + std::to_string(info[0] != '\0') +
           " info_bytes_reported=" + std::to_string(reinterpret_cast<uintptr_t>(values[1]) > 1) +
           " wall_reported=" + std::to_string(values[2] != nullptr);
  }
  return out;
}

// Suggested block sizes: with no dynamic shared memory, with a fixed amount, with a function of the block size
// (4 bytes a thread), and under a limit.
std::string case_potential_block_size() {
  CUfunction add = g.function("vector_add");
  std::string out;
  const auto ask = [&](CUoccupancyB2DSize smem_of, size_t smem, int limit) {
    int min_grid = 0, block = 0;
    CU_CHECK(cuOccupancyMaxPotentialBlockSizeWithFlags(&min_grid, &block, add, smem_of, smem, limit,
                                                        CU_OCCUPANCY_DEFAULT));
    out += " " + std::to_string(min_grid) + "x" + std::to_string(block);
  };
  ask(nullptr, 0, 0);
  ask(nullptr, 48 * 1024, 0);
  ask([](int threads) -> size_t { return static_cast<size_t>(threads) * 4; }, 0, 0);
  ask(nullptr, 0, 96);
  return out.substr(1);
}

// A device pool of the application's own: allocated from directly and as the device's current pool, its
// attributes apart from the default pool's, destroyed (the default pool is current again).
std::string case_created_memory_pool() {
  g.require_context();
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr, default_pool = nullptr, current = nullptr;
  CU_CHECK(cuMemPoolCreate(&pool, &props));
  CU_CHECK(cuDeviceGetDefaultMemPool(&default_pool, 0));
  cuuint64_t threshold = 8 << 20, own = 0, other = 0;
  CU_CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  CU_CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &own));
  CU_CHECK(cuMemPoolGetAttribute(default_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &other));
  Stream s = make_stream();
  const size_t n = 1 << 20;
  CUdeviceptr a = 0, b = 0;
  CU_CHECK(cuMemAllocFromPoolAsync(&a, n * 4, pool, s.get()));
  CU_CHECK(cuDeviceSetMemPool(0, pool));
  CU_CHECK(cuDeviceGetMemPool(&current, 0));
  const bool became_current = current == pool;
  CU_CHECK(cuMemAllocAsync(&b, n * 4, s.get()));
  CU_CHECK(cuMemsetD32Async(a, 0x1234567u, n, s.get()));
  CU_CHECK(cuMemcpyDtoDAsync(b, a, n * 4, s.get()));
  cuuint64_t used = 0;
  CU_CHECK(cuStreamSynchronize(s.get()));
  CU_CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  std::vector<uint32_t> back(n);
  CU_CHECK(cuMemcpyDtoH(back.data(), b, n * 4));
  CU_CHECK(cuMemFreeAsync(a, s.get()));
  CU_CHECK(cuMemFreeAsync(b, s.get()));
  CU_CHECK(cuStreamSynchronize(s.get()));
  CU_CHECK(cuMemPoolTrimTo(pool, 0));
  CU_CHECK(cuMemPoolDestroy(pool));
  CU_CHECK(cuDeviceGetMemPool(&current, 0));
  Fnv1a f;
  f.add(back.data(), back.size() * 4);
  return "own=" + std::to_string(own) + " default=" + std::to_string(other) + " current=" +
         std::to_string(became_current) + " used_at_least=" + std::to_string(used >= 2 * n * 4) +
         " default_again=" + std::to_string(current == default_pool) + " " + f.hex();
}

// Cache and shared-memory configuration and flags of the current context, set and read back, then restored.
std::string case_context_settings() {
  g.require_context();
  CUfunc_cache cache = CU_FUNC_CACHE_PREFER_NONE, cache_after = CU_FUNC_CACHE_PREFER_NONE;
  CU_CHECK(cuCtxGetCacheConfig(&cache));
  CU_CHECK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1));
  CU_CHECK(cuCtxGetCacheConfig(&cache_after));
  CU_CHECK(cuCtxSetCacheConfig(cache));
  CUsharedconfig shared = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;
  const CUresult shared_result = cuCtxGetSharedMemConfig(&shared);
  unsigned flags = 0, flags_after = 0;
  CU_CHECK(cuCtxGetFlags(&flags));
  CU_CHECK(cuCtxSetFlags(CU_CTX_SCHED_YIELD));
  CU_CHECK(cuCtxGetFlags(&flags_after));
  CU_CHECK(cuCtxSetFlags(flags & (CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST)));
  const CUresult bad_flags = cuCtxSetFlags(0x1000000);
  unsigned long long id = 0;
  CU_CHECK(cuCtxGetId(nullptr, &id));
  return "cache=" + std::to_string(cache) + "->" + std::to_string(cache_after) + " shared=" + code_str(shared_result) +
         "/" + std::to_string(shared) + " flags_after_sched=" + std::to_string(flags_after & CU_CTX_SCHED_MASK) +
         " bad_flags=" + code_str(bad_flags) + " id_nonzero=" + std::to_string(id != 0);
}

// A library loaded from its file, its module in this context (the same one for its kernel's function), a function
// of that module, and the kernel's library.
std::string case_library_module() {
  g.require_context();
  Library lib;
  CU_CHECK(cuLibraryLoadFromFile(lib.out(), g.fatbin_path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUmodule module = nullptr, again = nullptr, of_function = nullptr;
  CU_CHECK(cuLibraryGetModule(&module, lib.get()));
  CU_CHECK(cuLibraryGetModule(&again, lib.get()));
  CUkernel kernel = nullptr;
  CU_CHECK(cuLibraryGetKernel(&kernel, lib.get(), "vector_add"));
  CUlibrary owner = nullptr;
  CU_CHECK(cuKernelGetLibrary(&owner, kernel));
  CUfunction bound = nullptr, from_module = nullptr;
  CU_CHECK(cuKernelGetFunction(&bound, kernel));
  CU_CHECK(cuFuncGetModule(&of_function, bound));
  CU_CHECK(cuModuleGetFunction(&from_module, module, "vector_add"));
  CUmodule module_of_module_function = nullptr;
  CU_CHECK(cuFuncGetModule(&module_of_module_function, from_module));
  unsigned count = 0;
  CU_CHECK(cuModuleGetFunctionCount(&count, module));
  CUlibrary missing = nullptr;
  const CUresult no_file = cuLibraryLoadFromFile(&missing, "/nonexistent/kernels.fatbin", nullptr, nullptr, 0,
                                                 nullptr, nullptr, 0);
  return run_vector_add(from_module, 333, 32) + " same_module=" + std::to_string(module == again) +
         " function_module=" + std::to_string(of_function == module) +
         " module_function_module=" + std::to_string(module_of_module_function == module) +
         " kernel_library=" + std::to_string(owner == lib.get()) + " functions=" + std::to_string(count) +
         " missing=" + code_str(no_file);
}

std::string case_module_global() {
  CUfunction add = g.function("add_to_global");
  CUdeviceptr counter = 0;
  size_t bytes = 0;
  CU_CHECK(cuModuleGetGlobal(&counter, &bytes, g.module.get(), "global_counter"));
  unsigned initial = 0xFFFFFFFFu, after_add = 0, after_second = 0;
  CU_CHECK(cuMemcpyDtoH(&initial, counter, sizeof initial));
  const unsigned start = 100;
  unsigned seven = 7;
  void* add_args[] = {&seven};
  CU_CHECK(cuMemcpyHtoD(counter, &start, sizeof start));
  CU_CHECK(launch(add, 1, 1, nullptr, 5u));
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(&after_add, counter, sizeof after_add));
  CU_CHECK(cuLaunchKernel(add, 2, 1, 1, 3, 1, 1, 0, nullptr, add_args, nullptr));  // 6 threads add 7 each
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(&after_second, counter, sizeof after_second));
  std::ostringstream out;
  out << "bytes=" << bytes << " initial=" << initial << " after=" << after_add << "," << after_second;
  return out.str();
}

// Managed globals (__managed__): read and written by the host at the address the look-up answers, and by kernels.
constexpr const char* kManagedGlobalsPtx = R"(.version 8.0
.target sm_90
.address_size 64
.visible .global .attribute(.managed) .align 4 .u32 managed_counter = 10;
.visible .global .attribute(.managed) .align 4 .u32 managed_twice;
.visible .entry add_to_managed(.param .u32 add_to_managed_param_0) {
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  ld.param.u32 %r1, [add_to_managed_param_0];
  mov.u64 %rd1, managed_counter;
  atom.global.add.u32 %r2, [%rd1], %r1;
  ret;
}
.visible .entry double_managed() {
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  mov.u64 %rd1, managed_counter;
  ld.global.u32 %r1, [%rd1];
  shl.b32 %r2, %r1, 1;
  mov.u64 %rd2, managed_twice;
  st.global.u32 [%rd2], %r2;
  ret;
}
)";

std::string case_managed_globals() {
  // Both runs of a remote suite say the same: there curelay refuses managed globals (no memory is shared over the
  // network; tested on the emulated driver, tcp.RemoteMemoryTest.ManagedGlobalsAreOneAddressForHostAndKernels).
  if (const char* suite = std::getenv("CURELAY_GPU_ENDPOINT"); suite != nullptr && std::strncmp(suite, "ipc://", 6) != 0) {
    return "not run: the suite's endpoint is remote";
  }
  Module module;
  CU_CHECK(cuModuleLoadData(module.out(), kManagedGlobalsPtx));
  CUfunction add = nullptr, twice = nullptr;
  CU_CHECK(cuModuleGetFunction(&add, module.get(), "add_to_managed"));
  CU_CHECK(cuModuleGetFunction(&twice, module.get(), "double_managed"));
  CUdeviceptr counter = 0, doubled = 0;
  size_t bytes = 0;
  CU_CHECK(cuModuleGetGlobal(&counter, &bytes, module.get(), "managed_counter"));
  CU_CHECK(cuModuleGetGlobal(&doubled, &bytes, module.get(), "managed_twice"));
  auto* value = reinterpret_cast<volatile unsigned*>(counter);
  std::ostringstream out;
  out << "bytes=" << bytes << " initial=" << *value;
  *value = 100;
  unsigned five = 5;
  void* args[] = {&five};
  CU_CHECK(cuLaunchKernel(add, 2, 1, 1, 3, 1, 1, 0, nullptr, args, nullptr));  // 6 threads add 5 each
  CU_CHECK(cuCtxSynchronize());
  out << " after_add=" << *value;
  CU_CHECK(cuLaunchKernel(twice, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  CU_CHECK(cuCtxSynchronize());
  unsigned copied = 0;
  CU_CHECK(cuMemcpyDtoH(&copied, doubled, sizeof copied));
  out << " twice=" << *reinterpret_cast<volatile unsigned*>(doubled) << " copied=" << copied;
  unsigned is_managed = 0;
  CU_CHECK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, counter));
  out << " is_managed=" << is_managed;
  CUlibrary library = nullptr;
  CU_CHECK(cuLibraryLoadData(&library, kManagedGlobalsPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUdeviceptr of_library = 0;
  CU_CHECK(cuLibraryGetManaged(&of_library, &bytes, library, "managed_counter"));
  out << " library_initial=" << *reinterpret_cast<volatile unsigned*>(of_library);
  out << " not_managed=" << cuLibraryGetManaged(&of_library, &bytes, library, "no_such_variable");
  CU_CHECK(cuLibraryUnload(library));
  return out.str();
}

std::string case_vector_add(int n, unsigned block) { return run_vector_add(g.function("vector_add"), n, block); }

// param_probe: thread 0 writes 11 u64 words (u8, u16, u32, u64, f32 bits, f64 bits, s.c, s.d bits,
// s.i[0..2]); signed values sign-extended.
constexpr unsigned char kProbeU8 = 0xAB;
constexpr unsigned short kProbeU16 = 0xBEEF;
constexpr unsigned int kProbeU32 = 0xDEADBEEFu;
constexpr unsigned long long kProbeU64 = 0x0123456789ABCDEFULL;
constexpr float kProbeF32 = 3.5f;
constexpr double kProbeF64 = -2.25;
constexpr ProbeStruct kProbeStruct = {'x', 1.0 / 3.0, {7, -8, 0x7FFFFFFF}};  // the kernel sign-extends
constexpr int kProbeWords = 11;

std::string probe_result(const std::array<unsigned long long, kProbeWords>& words) {
  const std::array<unsigned long long, kProbeWords> expect = {
      kProbeU8,
      kProbeU16,
      kProbeU32,
      kProbeU64,
      std::bit_cast<uint32_t>(kProbeF32),
      std::bit_cast<uint64_t>(kProbeF64),
      static_cast<unsigned long long>(kProbeStruct.c),
      std::bit_cast<uint64_t>(kProbeStruct.d),
      static_cast<unsigned long long>(kProbeStruct.i[0]),
      static_cast<unsigned long long>(kProbeStruct.i[1]),
      static_cast<unsigned long long>(kProbeStruct.i[2]),
  };
  const std::string d = digest(words.data(), sizeof words);
  if (words == expect) return "ok " + d;
  std::string out = "mismatch " + d + " words=";
  for (int i = 0; i < kProbeWords; ++i) out += (i ? "," : "") + hex_u64(words[i]);
  return out;
}

std::string case_param_probe_kernel_params() {
  CUfunction f = g.function("param_probe");
  DeviceMemory out = device_alloc(sizeof(unsigned long long) * kProbeWords);
  CU_CHECK(cuMemsetD8(out.get(), 0, sizeof(unsigned long long) * kProbeWords));
  CU_CHECK(launch(f, 1, 32, nullptr, kProbeU8, kProbeU16, kProbeU32, kProbeU64, kProbeF32, kProbeF64, kProbeStruct,
                  out.get()));
  CU_CHECK(cuCtxSynchronize());
  std::array<unsigned long long, kProbeWords> words{};
  CU_CHECK(cuMemcpyDtoH(words.data(), out.get(), sizeof words));
  return probe_result(words);
}

std::string case_param_probe_extra_buffer() {
  CUfunction f = g.function("param_probe");
  DeviceMemory out = device_alloc(sizeof(unsigned long long) * kProbeWords);
  CU_CHECK(cuMemsetD8(out.get(), 0, sizeof(unsigned long long) * kProbeWords));
  const CUdeviceptr out_ptr = out.get();

  // The host-side value of each parameter, in declaration order.
  const std::array<std::pair<const void*, size_t>, 8> args = {{
      {&kProbeU8, sizeof kProbeU8},
      {&kProbeU16, sizeof kProbeU16},
      {&kProbeU32, sizeof kProbeU32},
      {&kProbeU64, sizeof kProbeU64},
      {&kProbeF32, sizeof kProbeF32},
      {&kProbeF64, sizeof kProbeF64},
      {&kProbeStruct, sizeof kProbeStruct},
      {&out_ptr, sizeof out_ptr},
  }};
  std::vector<unsigned char> buffer;
  std::string layout;
  for (size_t i = 0; i < args.size(); ++i) {
    size_t offset = 0, size = 0;
    CU_CHECK(cuFuncGetParamInfo(f, i, &offset, &size));
    if (size != args[i].second) {
      throw std::runtime_error("param " + std::to_string(i) + " size " + std::to_string(size) + " expected " +
                               std::to_string(args[i].second));
    }
    if (buffer.size() < offset + size) buffer.resize(offset + size, 0);
    std::memcpy(buffer.data() + offset, args[i].first, size);
    layout += (i ? "," : "") + std::to_string(offset) + "+" + std::to_string(size);
  }
  // One past the last parameter must be rejected.
  size_t offset = 0, size = 0;
  const CUresult past_end = cuFuncGetParamInfo(f, args.size(), &offset, &size);

  size_t buffer_size = buffer.size();
  void* config[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
                    CU_LAUNCH_PARAM_END};
  CU_CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, config));
  CU_CHECK(cuCtxSynchronize());
  std::array<unsigned long long, kProbeWords> words{};
  CU_CHECK(cuMemcpyDtoH(words.data(), out.get(), sizeof words));
  return probe_result(words) + " layout=" + layout + " past_end=" + code_str(past_end);
}

// ---------------------------------------------------------------------------------------------
// Copies and memsets

constexpr size_t kMiB = size_t{1} << 20;

// HtoD into an unaligned device offset, DtoD to another unaligned offset, DtoH back; host pointers
// are unaligned too.
std::string case_copy_sync(size_t n) {
  g.require_context();
  const size_t src_off = 1 + n % 7, dst_off = 3, host_off = 1;
  std::vector<unsigned char> src(n + host_off), back(n + host_off, 0);
  fill_pseudo_random(src.data() + host_off, n, 0xC0FFEE00ULL ^ n);
  DeviceMemory a = device_alloc(n + 16), b = device_alloc(n + 16);
  CU_CHECK(cuMemcpyHtoD(a.get() + src_off, src.data() + host_off, n));
  CU_CHECK(cuMemcpyDtoD(b.get() + dst_off, a.get() + src_off, n));
  CU_CHECK(cuMemcpyDtoH(back.data() + host_off, b.get() + dst_off, n));
  const std::string d = digest(back.data() + host_off, n);
  const bool ok = std::memcmp(src.data() + host_off, back.data() + host_off, n) == 0;
  return (ok ? "ok " : "mismatch ") + d;
}

// Async copies on two streams ordered only by events: s1 waits 10 ms, then HtoD into A; s2 waits for
// that, copies A to B; s1 waits for the copy, then DtoH from B. Misordering shows up as the fill
// bytes (0xEE in A, 0x00 in B) in the digest.
std::string case_copy_async(size_t n, bool pinned) {
  CUfunction busy = g.function("busy_wait_ns");
  std::vector<unsigned char> pageable_src, pageable_dst;
  PinnedMemory pinned_src, pinned_dst;
  unsigned char *src = nullptr, *dst = nullptr;
  if (pinned) {
    pinned_src = pinned_alloc(n);
    pinned_dst = pinned_alloc(n);
    src = static_cast<unsigned char*>(pinned_src.get());
    dst = static_cast<unsigned char*>(pinned_dst.get());
  } else {
    pageable_src.resize(n);
    pageable_dst.resize(n);
    src = pageable_src.data();
    dst = pageable_dst.data();
  }
  fill_pseudo_random(src, n, 0xA5C0FFEEULL ^ n);
  std::memset(dst, 0x33, n);
  const size_t a_off = 5, b_off = 2;
  DeviceMemory a = device_alloc(n + 16), b = device_alloc(n + 16);
  CU_CHECK(cuMemsetD8(a.get(), 0xEE, n + 16));
  CU_CHECK(cuMemsetD8(b.get(), 0x00, n + 16));
  CU_CHECK(cuCtxSynchronize());
  Stream s1 = make_stream(), s2 = make_stream();
  Event copied_in = make_event(CU_EVENT_DISABLE_TIMING), copied_across = make_event(CU_EVENT_DISABLE_TIMING);
  CU_CHECK(launch(busy, 1, 1, s1.get(), 10'000'000ULL));
  CU_CHECK(cuMemcpyHtoDAsync(a.get() + a_off, src, n, s1.get()));
  CU_CHECK(cuEventRecord(copied_in.get(), s1.get()));
  CU_CHECK(cuStreamWaitEvent(s2.get(), copied_in.get(), 0));
  CU_CHECK(cuMemcpyDtoDAsync(b.get() + b_off, a.get() + a_off, n, s2.get()));
  CU_CHECK(cuEventRecord(copied_across.get(), s2.get()));
  CU_CHECK(cuStreamWaitEvent(s1.get(), copied_across.get(), 0));
  CU_CHECK(cuMemcpyDtoHAsync(dst, b.get() + b_off, n, s1.get()));
  CU_CHECK(cuStreamSynchronize(s1.get()));
  const std::string d = digest(dst, n);
  const bool ok = std::memcmp(src, dst, n) == 0;
  return (ok ? "ok " : "mismatch ") + d;
}

struct MemsetOp {
  int width;  // 1, 2 or 4 bytes
  size_t byte_offset;
  uint32_t value;
  size_t count;  // elements
};

void apply_memset(std::vector<unsigned char>& model, const MemsetOp& op) {
  for (size_t i = 0; i < op.count; ++i) {
    std::memcpy(model.data() + op.byte_offset + i * op.width, &op.value, op.width);
  }
}

std::string run_memsets(const std::vector<MemsetOp>& ops, bool async) {
  g.require_context();
  const size_t total = kMiB + 64;
  std::vector<unsigned char> model(total, 0xCD), back(total, 0);
  DeviceMemory m = device_alloc(total);
  CU_CHECK(cuMemsetD8(m.get(), 0xCD, total));
  CU_CHECK(cuCtxSynchronize());
  Stream s = make_stream();
  for (const MemsetOp& op : ops) {
    const CUdeviceptr p = m.get() + op.byte_offset;
    if (async) {
      switch (op.width) {
        case 1: CU_CHECK(cuMemsetD8Async(p, static_cast<unsigned char>(op.value), op.count, s.get())); break;
        case 2: CU_CHECK(cuMemsetD16Async(p, static_cast<unsigned short>(op.value), op.count, s.get())); break;
        default: CU_CHECK(cuMemsetD32Async(p, op.value, op.count, s.get())); break;
      }
    } else {
      switch (op.width) {
        case 1: CU_CHECK(cuMemsetD8(p, static_cast<unsigned char>(op.value), op.count)); break;
        case 2: CU_CHECK(cuMemsetD16(p, static_cast<unsigned short>(op.value), op.count)); break;
        default: CU_CHECK(cuMemsetD32(p, op.value, op.count)); break;
      }
    }
    apply_memset(model, op);
  }
  if (async) CU_CHECK(cuStreamSynchronize(s.get()));
  CU_CHECK(cuMemcpyDtoH(back.data(), m.get(), total));
  const std::string d = digest(back.data(), total);
  return (back == model ? "ok " : "mismatch ") + d;
}

std::string case_memset_sync() {
  return run_memsets({{1, 3, 0x5A, 1001},
                      {2, 2050, 0xBEEF, 777},
                      {4, 8196, 0xDEADBEEF, 12345},
                      {1, 8190, 0x11, 9},  // overlaps the D32 range above
                      {1, 100001, 0x22, 1},
                      {4, 600004, 0x01020304, 100003}},
                     false);
}

std::string case_memset_async() {
  return run_memsets({{1, 200003, 0x77, 65537},
                      {2, 300002, 0x1234, 4097},
                      {4, 400008, 0xCAFEBABE, 33333},
                      {1, 400010, 0xEE, 5},  // overlaps the D32 range above; same stream, so ordered
                      {2, 6, 0x8001, 1},
                      {4, 1048572, 0x0BADF00D, 17}},
                     true);
}

// ---------------------------------------------------------------------------------------------
// Streams and events

std::string case_stream_flags_priorities() {
  g.require_context();
  int least = 0, greatest = 0;
  CU_CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
  struct Spec {
    unsigned flags;
    int priority;
  };
  const Spec specs[] = {{CU_STREAM_DEFAULT, least},
                        {CU_STREAM_NON_BLOCKING, greatest},
                        {CU_STREAM_NON_BLOCKING, least},
                        {CU_STREAM_DEFAULT, greatest - 10},  // clamped to greatest
                        {CU_STREAM_NON_BLOCKING, least + 10}};  // clamped to least
  std::ostringstream out;
  out << "range=" << least << ".." << greatest;
  for (const Spec& spec : specs) {
    Stream s = make_stream(spec.flags, spec.priority);
    unsigned flags = 0;
    int priority = 0;
    CU_CHECK(cuStreamGetFlags(s.get(), &flags));
    CU_CHECK(cuStreamGetPriority(s.get(), &priority));
    CUcontext ctx = nullptr;
    CU_CHECK(cuStreamGetCtx(s.get(), &ctx));
    out << " " << flags << "/" << priority << (ctx == g.primary ? "/primary" : "/other");
  }
  Stream plain;
  CU_CHECK(cuStreamCreate(plain.out(), CU_STREAM_NON_BLOCKING));
  unsigned flags = 0;
  int priority = -99;
  CU_CHECK(cuStreamGetFlags(plain.get(), &flags));
  CU_CHECK(cuStreamGetPriority(plain.get(), &priority));
  out << " plain=" << flags << "/" << priority;
  CUcontext owner = nullptr;
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(1);
  CUdevice device = -1, legacy_device = -1;
  CU_CHECK(cuStreamGetCtx_v2(plain.get(), &owner, &green));
  CU_CHECK(cuStreamGetDevice(plain.get(), &device));
  CU_CHECK(cuStreamGetDevice(nullptr, &legacy_device));
  out << " ctx_v2=" << (owner == g.primary ? "primary" : "other") << "/green_null=" << (green == nullptr)
      << " device=" << device << "," << legacy_device;
  return out.str();
}

// s1: busy 50 ms, fill 100, record; s2: wait, increment. Ordered -> every element is 101.
std::string case_stream_wait_event() {
  CUfunction busy = g.function("busy_wait_ns"), fill = g.function("fill_u32"), inc = g.function("increment_i32");
  const int n = 1 << 20;
  DeviceMemory m = device_alloc(sizeof(int) * n);
  CU_CHECK(cuMemsetD32(m.get(), 0, n));
  CU_CHECK(cuCtxSynchronize());
  Stream s1 = make_stream(), s2 = make_stream();
  Event filled = make_event(CU_EVENT_DISABLE_TIMING);
  CU_CHECK(launch(busy, 1, 1, s1.get(), 50'000'000ULL));
  CU_CHECK(launch(fill, blocks_for(n, 256), 256, s1.get(), m.get(), 100u, static_cast<unsigned long long>(n)));
  CU_CHECK(cuEventRecord(filled.get(), s1.get()));
  CU_CHECK(cuStreamWaitEvent(s2.get(), filled.get(), 0));
  CU_CHECK(launch(inc, blocks_for(n, 256), 256, s2.get(), m.get(), n));
  CU_CHECK(cuStreamSynchronize(s2.get()));
  std::vector<int> host(n);
  CU_CHECK(cuMemcpyDtoH(host.data(), m.get(), sizeof(int) * host.size()));
  const auto ordered = std::count(host.begin(), host.end(), 101);
  return "ordered=" + std::to_string(ordered) + "/" + std::to_string(n);
}

std::string case_event_elapsed() {
  CUfunction busy = g.function("busy_wait_ns");
  Stream s = make_stream();
  Event start = make_event(), stop = make_event();
  CU_CHECK(cuEventRecord(start.get(), s.get()));
  CU_CHECK(launch(busy, 1, 1, s.get(), 20'000'000ULL));
  CU_CHECK(cuEventRecord(stop.get(), s.get()));
  CU_CHECK(cuEventSynchronize(stop.get()));
  float ms = -1.0f;
  CU_CHECK(cuEventElapsedTime(&ms, start.get(), stop.get()));
  if (ms >= 19.5f && ms <= 200.0f) return "ok";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3fms", ms);
  return buf;
}

std::string case_stream_query() {
  CUfunction busy = g.function("busy_wait_ns");
  Stream s = make_stream();
  Event done = make_event(CU_EVENT_DISABLE_TIMING);
  CU_CHECK(launch(busy, 1, 1, s.get(), 300'000'000ULL));
  CU_CHECK(cuEventRecord(done.get(), s.get()));
  const CUresult stream_during = cuStreamQuery(s.get());
  const CUresult event_during = cuEventQuery(done.get());
  CU_CHECK(cuStreamSynchronize(s.get()));
  const CUresult stream_after = cuStreamQuery(s.get());
  const CUresult event_after = cuEventQuery(done.get());
  return "during=" + code_str(stream_during) + "," + code_str(event_during) + " after=" + code_str(stream_after) +
         "," + code_str(event_after);
}

// Host functions in stream order: each runs after the stream's earlier work (a 20 ms kernel) and holds the later
// work (a memset) while it sleeps; a stream callback gets its stream and CUDA_SUCCESS. Prints the order the three
// functions ran in, the stream's state while one sleeps, and the memset's result.
std::string case_host_functions() {
  CUfunction busy = g.function("busy_wait_ns");
  Stream s = make_stream();
  DeviceMemory word = device_alloc(4);
  CU_CHECK(cuMemsetD32(word.get(), 0, 1));
  struct Log {
    std::mutex mutex;
    std::string order;
    CUstream callback_stream = nullptr;
    CUresult callback_status = CUDA_ERROR_UNKNOWN;
  } log;
  CU_CHECK(launch(busy, 1, 1, s.get(), 20'000'000ULL));
  CU_CHECK(cuLaunchHostFunc(s.get(), [](void* data) {
    auto* l = static_cast<Log*>(data);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard<std::mutex> lock(l->mutex);
    l->order += "a";
  }, &log));
  CU_CHECK(cuMemsetD32Async(word.get(), 7, 1, s.get()));
  CU_CHECK(cuLaunchHostFunc(s.get(), [](void* data) {
    auto* l = static_cast<Log*>(data);
    std::lock_guard<std::mutex> lock(l->mutex);
    l->order += "b";
  }, &log));
  CU_CHECK(cuStreamAddCallback(s.get(), [](CUstream stream, CUresult status, void* data) {
    auto* l = static_cast<Log*>(data);
    std::lock_guard<std::mutex> lock(l->mutex);
    l->order += "c";
    l->callback_stream = stream;
    l->callback_status = status;
  }, &log, 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const CUresult held = cuStreamQuery(s.get());
  CU_CHECK(cuStreamSynchronize(s.get()));
  unsigned value = 0;
  CU_CHECK(cuMemcpyDtoH(&value, word.get(), 4));
  return "order=" + log.order + " held=" + code_str(held) + " value=" + std::to_string(value) +
         " callback_stream_ok=" + std::to_string(log.callback_stream == s.get()) +
         " callback_status=" + code_str(log.callback_status);
}

// ---------------------------------------------------------------------------------------------
// Stream capture and CUDA graphs

// Captures a memset and two kernels (c = 0; c = a + b; d += 1), instantiates the graph and replays it three times
// with new inputs: node census, then "ok" and a digest of every round's results.
std::string case_graph_capture_replay() {
  CUfunction add = g.function("vector_add"), inc = g.function("increment_i32");
  const int n = 1 << 16;
  const size_t bytes = sizeof(float) * static_cast<size_t>(n);
  DeviceMemory a = device_alloc(bytes), b = device_alloc(bytes), c = device_alloc(bytes);
  DeviceMemory d = device_alloc(sizeof(int) * static_cast<size_t>(n));
  CU_CHECK(cuMemsetD32(d.get(), 0, n));
  CU_CHECK(cuMemsetD32(c.get(), 0x7fc00000u, n));  // NaN: shows whether capture ran anything
  CU_CHECK(cuCtxSynchronize());
  Stream s = make_stream();
  Graph graph;
  CU_CHECK(cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_CHECK(cuMemsetD32Async(c.get(), 0, n, s.get()));
  CU_CHECK(launch(add, blocks_for(n, 256), 256, s.get(), a.get(), b.get(), c.get(), n));
  CU_CHECK(launch(inc, blocks_for(n, 256), 256, s.get(), d.get(), n));
  CU_CHECK(cuStreamEndCapture(s.get(), graph.out()));
  std::vector<uint32_t> untouched(static_cast<size_t>(n));
  CU_CHECK(cuMemcpyDtoH(untouched.data(), c.get(), bytes));
  const bool capture_ran = std::any_of(untouched.begin(), untouched.end(), [](uint32_t v) { return v != 0x7fc00000u; });
  size_t count = 0;
  CU_CHECK(cuGraphGetNodes(graph.get(), nullptr, &count));
  std::vector<CUgraphNode> nodes(count);
  CU_CHECK(cuGraphGetNodes(graph.get(), nodes.data(), &count));
  int kernels = 0, memsets = 0, others = 0;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    CU_CHECK(cuGraphNodeGetType(node, &type));
    (type == CU_GRAPH_NODE_TYPE_KERNEL ? kernels : type == CU_GRAPH_NODE_TYPE_MEMSET ? memsets : others)++;
  }
  GraphExec exec;
  CU_CHECK(cuGraphInstantiateWithFlags(exec.out(), graph.get(), 0));
  graph.reset();  // PyTorch destroys the graph once it is instantiated
  Fnv1a f;
  bool ok = !capture_ran;
  std::vector<float> ha(static_cast<size_t>(n)), hb(static_cast<size_t>(n)), hc(static_cast<size_t>(n));
  std::vector<int> hd(static_cast<size_t>(n));
  for (int round = 0; round < 3; ++round) {
    uint64_t state = 0x9a9a0000ULL + static_cast<uint64_t>(round);
    for (int i = 0; i < n; ++i) {
      ha[i] = static_cast<float>(splitmix64(state) >> 40) / 1024.0f;
      hb[i] = static_cast<float>(round * 1000 + i % 977);
    }
    CU_CHECK(cuMemcpyHtoD(a.get(), ha.data(), bytes));
    CU_CHECK(cuMemcpyHtoD(b.get(), hb.data(), bytes));
    // A synchronous copy from pageable memory may return before its DMA lands, and `s` does not wait for the
    // legacy stream: without this the graph could read old inputs (seen natively).
    CU_CHECK(cuCtxSynchronize());
    CU_CHECK(cuGraphLaunch(exec.get(), s.get()));
    CU_CHECK(cuStreamSynchronize(s.get()));
    CU_CHECK(cuMemcpyDtoH(hc.data(), c.get(), bytes));
    CU_CHECK(cuMemcpyDtoH(hd.data(), d.get(), sizeof(int) * hd.size()));
    for (int i = 0; i < n; ++i) {
      ok = ok && std::bit_cast<uint32_t>(hc[i]) == std::bit_cast<uint32_t>(ha[i] + hb[i]) && hd[i] == round + 1;
    }
    f.add(hc.data(), bytes);
    f.add(hd.data(), sizeof(int) * hd.size());
  }
  std::ostringstream out;
  out << (ok ? "ok" : "mismatch") << " nodes=" << count << " kernels=" << kernels << " memsets=" << memsets
      << " others=" << others << " " << f.hex();
  return out.str();
}

// Capture state as the application sees it: statuses, capture info and its dependencies, the legacy stream during
// non-blocking and blocking captures, ending from the wrong thread, the thread's interaction mode.
std::string case_graph_capture_queries() {
  CUfunction fill = g.function("fill_u32");
  DeviceMemory m = device_alloc(4096);
  Stream s = make_stream(), blocking = make_stream(CU_STREAM_DEFAULT);
  std::ostringstream out;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  CU_CHECK(cuStreamIsCapturing(s.get(), &status));
  out << "before=" << status;
  CU_CHECK(cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_CHECK(cuStreamIsCapturing(s.get(), &status));
  out << " during=" << status;
  cuuint64_t id = 0;
  CUgraph in_capture = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t ndeps = 99;
  // Codes are printed rather than checked: what matters is that curelay answers as the driver does.
  const CUresult info = cuStreamGetCaptureInfo(s.get(), &status, &id, &in_capture, &deps, nullptr, &ndeps);
  out << " info=" << info << ":" << status << "/" << (id != 0) << "/" << (in_capture != nullptr) << "/" << ndeps;
  CU_CHECK(launch(fill, 1, 64, s.get(), m.get(), 5u, 64ULL));
  const CUresult info_after = cuStreamGetCaptureInfo(s.get(), &status, nullptr, nullptr, &deps, nullptr, &ndeps);
  int type = -1;
  CUresult type_result = CUDA_ERROR_UNKNOWN;
  if (info_after == CUDA_SUCCESS && ndeps == 1) {
    CUgraphNodeType t;
    type_result = cuGraphNodeGetType(deps[0], &t);
    if (type_result == CUDA_SUCCESS) type = t;
  }
  out << " after_kernel=" << info_after << ":" << ndeps << "/" << type_result << ":" << type;
  const CUresult legacy = cuStreamIsCapturing(CU_STREAM_LEGACY, &status);
  out << " legacy=" << legacy << "/" << (legacy == CUDA_SUCCESS ? static_cast<int>(status) : -1);
  CUresult other_thread = CUDA_SUCCESS;
  std::thread([&] {
    CUgraph other = nullptr;
    other_thread = cuCtxSetCurrent(g.primary);
    if (other_thread == CUDA_SUCCESS) other_thread = cuStreamEndCapture(s.get(), &other);
  }).join();
  out << " other_thread_end=" << other_thread;
  Graph graph;
  const CUresult end = cuStreamEndCapture(s.get(), graph.out());
  out << " end=" << end << " same_graph=" << (graph.get() == in_capture);
  const CUresult after = cuStreamIsCapturing(s.get(), &status);
  out << " after=" << after << ":" << (after == CUDA_SUCCESS ? static_cast<int>(status) : -1);
  CU_CHECK(cuStreamBeginCapture(blocking.get(), CU_STREAM_CAPTURE_MODE_GLOBAL));
  out << " legacy_blocking=" << cuStreamIsCapturing(CU_STREAM_LEGACY, &status);
  Graph second;
  out << " end_blocking=" << cuStreamEndCapture(blocking.get(), second.out());
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CU_CHECK(cuThreadExchangeStreamCaptureMode(&mode));
  out << " mode=" << mode;
  CU_CHECK(cuThreadExchangeStreamCaptureMode(&mode));
  out << "," << mode;
  return out.str();
}

// The virtual memory API as PyTorch's expandable segments use it: two physical chunks mapped back to back in one
// reservation, used across the seam by copies, a memset and a kernel, then torn down.
std::string case_virtual_memory_map() {
  CUfunction fill = g.function("fill_u32");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  CU_CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUdeviceptr base = 0;
  CU_CHECK(cuMemAddressReserve(&base, 2 * granularity, 0, 0, 0));
  CUmemGenericAllocationHandle chunks[2] = {};
  for (auto& chunk : chunks) CU_CHECK(cuMemCreate(&chunk, granularity, &prop, 0));
  CU_CHECK(cuMemMap(base, granularity, 0, chunks[0], 0));
  CU_CHECK(cuMemMap(base + granularity, granularity, 0, chunks[1], 0));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_CHECK(cuMemSetAccess(base, 2 * granularity, &access, 1));
  const size_t words = 2 * granularity / 4;
  CU_CHECK(cuMemsetD32(base, 0x11111111u, words));
  const size_t seam = granularity / 4 - 100;  // 200 words straddling the boundary
  CU_CHECK(launch(fill, 1, 256, nullptr, base + seam * 4, 0xabcdef01u, 200ULL));
  std::vector<uint32_t> host(words);
  CU_CHECK(cuMemcpyDtoH(host.data(), base, 2 * granularity));
  Fnv1a f;
  f.add(host.data(), host.size() * 4);
  CUmemGenericAllocationHandle retained = 0;
  const CUresult retain = cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base + granularity + 8));
  if (retain == CUDA_SUCCESS) CU_CHECK(cuMemRelease(retained));
  CU_CHECK(cuMemUnmap(base, 2 * granularity));
  for (auto chunk : chunks) CU_CHECK(cuMemRelease(chunk));
  CU_CHECK(cuMemAddressFree(base, 2 * granularity));
  const CUresult map_unreserved = cuMemMap(base, granularity, 0, chunks[0], 0);
  return "granularity_ok=" + std::to_string(granularity >= 4096) + " retain=" + code_str(retain) +
         " map_after_free=" + code_str(map_unreserved) + " " + f.hex();
}

// Pitched memory and 2D/3D copies between host and device and within the device, at odd widths and offsets.
std::string case_memcpy_2d_3d() {
  const size_t width = 333, height = 37, depth = 3;
  CUdeviceptr pitched = 0;
  size_t pitch = 0;
  CU_CHECK(cuMemAllocPitch(&pitched, &pitch, width, height * depth, 4));
  std::vector<unsigned char> source(width * height * depth), back(width * height * depth);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i * 7 + 3);
  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = source.data();
  up.srcPitch = width;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = pitched;
  up.dstPitch = pitch;
  up.WidthInBytes = width;
  up.Height = height * depth;
  CU_CHECK(cuMemcpy2D(&up));
  CU_CHECK(cuMemsetD2D8(pitched + 5, pitch, 0xee, 17, 4));
  DeviceMemory copy = device_alloc(pitch * height * depth);
  CUDA_MEMCPY2D across{};
  across.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  across.srcDevice = pitched;
  across.srcPitch = pitch;
  across.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  across.dstDevice = copy.get();
  across.dstPitch = pitch;
  across.WidthInBytes = width;
  across.Height = height * depth;
  CU_CHECK(cuMemcpy2D(&across));
  CUDA_MEMCPY3D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = copy.get();
  down.srcPitch = pitch;
  down.srcHeight = height;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = back.data();
  down.dstPitch = width;
  down.dstHeight = height;
  down.WidthInBytes = width;
  down.Height = height;
  down.Depth = depth;
  CU_CHECK(cuMemcpy3D(&down));
  Fnv1a f;
  f.add(back.data(), back.size());
  CUDA_MEMCPY2D bad = up;
  bad.WidthInBytes = pitch + 1;
  const CUresult too_wide = cuMemcpy2D(&bad);
  CU_CHECK(cuMemFree(pitched));
  return "pitch_ok=" + std::to_string(pitch >= width) + " too_wide=" + code_str(too_wide) + " " + f.hex();
}

// CUDA arrays: descriptors, the 1D array copies, and arrays on either side of 2D/3D copies (a 3D copy larger than one
// wire chunk among them), with the data hashed after the round trips; and how the driver judges bad array calls.
std::string case_arrays() {
  std::ostringstream out;
  Fnv1a f;
  // 1D: host -> array -> array -> device -> array (at an offset) -> host.
  CUDA_ARRAY_DESCRIPTOR linear_descriptor{};
  linear_descriptor.Width = 8192;
  linear_descriptor.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  linear_descriptor.NumChannels = 1;
  CUarray line = nullptr, line_copy = nullptr;
  CU_CHECK(cuArrayCreate(&line, &linear_descriptor));
  CU_CHECK(cuArrayCreate(&line_copy, &linear_descriptor));
  std::vector<unsigned char> bytes(8192), back(8192);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 13 + 1);
  CU_CHECK(cuMemcpyHtoA(line, 0, bytes.data(), bytes.size()));
  CU_CHECK(cuMemcpyAtoA(line_copy, 0, line, 0, bytes.size()));
  DeviceMemory linear_device = device_alloc(8192);
  CU_CHECK(cuMemcpyAtoD(linear_device.get(), line_copy, 0, 8192));
  CU_CHECK(cuMemcpyDtoA(line_copy, 4096, linear_device.get(), 1000));
  CU_CHECK(cuMemcpyAtoH(back.data(), line_copy, 0, back.size()));
  f.add(back.data(), back.size());
  out << "linear_out_of_bounds=" << code_str(cuMemcpyHtoA(line, 8000, bytes.data(), 193));

  // 2D float2: a window of a pitched host image into the array, then array -> pitched device -> host.
  constexpr size_t kWidth = 61, kHeight = 29, kElement = 8;
  CUDA_ARRAY_DESCRIPTOR flat_descriptor{};
  flat_descriptor.Width = kWidth;
  flat_descriptor.Height = kHeight;
  flat_descriptor.Format = CU_AD_FORMAT_FLOAT;
  flat_descriptor.NumChannels = 2;
  CUarray flat = nullptr;
  CU_CHECK(cuArrayCreate(&flat, &flat_descriptor));
  const size_t row_bytes = kWidth * kElement, image_pitch = row_bytes + 40;
  std::vector<unsigned char> image(image_pitch * (kHeight + 4));
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<unsigned char>(i * 5 + 9);
  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = image.data();
  up.srcPitch = image_pitch;
  up.srcY = 2;
  up.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  up.dstArray = flat;
  up.WidthInBytes = row_bytes;
  up.Height = kHeight;
  CU_CHECK(cuMemcpy2D(&up));
  CUDA_MEMCPY2D window = up;
  window.srcXInBytes = 3 * kElement;
  window.dstXInBytes = 10 * kElement;
  window.dstY = 5;
  window.WidthInBytes = 7 * kElement;
  window.Height = 6;
  CU_CHECK(cuMemcpy2D(&window));
  CUdeviceptr pitched = 0;
  size_t pitch = 0;
  CU_CHECK(cuMemAllocPitch(&pitched, &pitch, row_bytes, kHeight, 8));
  Stream s = make_stream();
  CUDA_MEMCPY2D to_device{};
  to_device.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  to_device.srcArray = flat;
  to_device.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  to_device.dstDevice = pitched;
  to_device.dstPitch = pitch;
  to_device.WidthInBytes = row_bytes;
  to_device.Height = kHeight;
  CU_CHECK(cuMemcpy2DAsync(&to_device, s.get()));
  std::vector<unsigned char> flat_back(row_bytes * kHeight);
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = pitched;
  down.srcPitch = pitch;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = flat_back.data();
  down.dstPitch = row_bytes;
  down.WidthInBytes = row_bytes;
  down.Height = kHeight;
  CU_CHECK(cuMemcpy2DAsync(&down, s.get()));
  CU_CHECK(cuStreamSynchronize(s.get()));
  f.add(flat_back.data(), flat_back.size());
  window.dstXInBytes = (kWidth - 3) * kElement;
  out << " window_out_of_bounds=" << code_str(cuMemcpy2D(&window));

  // 3D float4, 6.9 MiB: host volume -> array -> host, stream-ordered.
  CUDA_ARRAY3D_DESCRIPTOR volume_descriptor{};
  volume_descriptor.Width = 300;
  volume_descriptor.Height = 75;
  volume_descriptor.Depth = 20;
  volume_descriptor.Format = CU_AD_FORMAT_FLOAT;
  volume_descriptor.NumChannels = 4;
  CUarray volume = nullptr;
  CU_CHECK(cuArray3DCreate(&volume, &volume_descriptor));
  const size_t volume_row = 300 * 16;
  std::vector<unsigned char> cube(volume_row * 75 * 20), cube_back(cube.size());
  for (size_t i = 0; i < cube.size(); ++i) cube[i] = static_cast<unsigned char>(i * 3 + (i >> 12));
  CUDA_MEMCPY3D cube_up{};
  cube_up.srcMemoryType = CU_MEMORYTYPE_HOST;
  cube_up.srcHost = cube.data();
  cube_up.srcPitch = volume_row;
  cube_up.srcHeight = 75;
  cube_up.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  cube_up.dstArray = volume;
  cube_up.WidthInBytes = volume_row;
  cube_up.Height = 75;
  cube_up.Depth = 20;
  CU_CHECK(cuMemcpy3DAsync(&cube_up, s.get()));
  CUDA_MEMCPY3D cube_down{};
  cube_down.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  cube_down.srcArray = volume;
  cube_down.srcXInBytes = 16;
  cube_down.srcY = 1;
  cube_down.srcZ = 2;
  cube_down.dstMemoryType = CU_MEMORYTYPE_HOST;
  cube_down.dstHost = cube_back.data();
  cube_down.dstPitch = volume_row;
  cube_down.dstHeight = 75;
  cube_down.WidthInBytes = volume_row - 16;
  cube_down.Height = 70;
  cube_down.Depth = 17;
  CU_CHECK(cuMemcpy3DAsync(&cube_down, s.get()));
  CU_CHECK(cuStreamSynchronize(s.get()));
  f.add(cube_back.data(), cube_back.size());

  CUDA_ARRAY_DESCRIPTOR read{};
  CUDA_ARRAY3D_DESCRIPTOR read3d{};
  const CUresult flat_of_volume = cuArrayGetDescriptor(&read, volume);
  CU_CHECK(cuArray3DGetDescriptor(&read3d, flat));
  out << " describe=" << read.Width << "x" << read.Height << "/" << code_str(flat_of_volume) << " describe3d="
      << read3d.Width << "x" << read3d.Height << "x" << read3d.Depth << "/" << read3d.Format << "/"
      << read3d.NumChannels;
  flat_descriptor.NumChannels = 3;
  CUarray bad = nullptr;
  out << " three_channels=" << code_str(cuArrayCreate(&bad, &flat_descriptor));
  CU_CHECK(cuMemFree(pitched));
  CU_CHECK(cuArrayDestroy(volume));
  CU_CHECK(cuArrayDestroy(flat));
  CU_CHECK(cuArrayDestroy(line_copy));
  CU_CHECK(cuArrayDestroy(line));
  out << " destroy_null=" << code_str(cuArrayDestroy(nullptr)) << " " << f.hex();
  return out.str();
}

// A pageable host-to-device copy captured into a graph. The driver captures it (its memcpy node reads the
// application's memory at replay); curelay cannot reach client memory at replay and refuses the capture
// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, invalidating it): a known difference, docs/stream-capture.md.
std::string case_graph_capture_pageable_htod() {
  DeviceMemory m = device_alloc(4096);
  Stream s = make_stream();
  CU_CHECK(cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_GLOBAL));
  const uint32_t host[4] = {1, 2, 3, 4};
  (void)cuMemcpyHtoDAsync(m.get(), host, sizeof host, s.get());  // where the error shows differs; the end does not
  CUgraph graph = nullptr;
  const CUresult r = cuStreamEndCapture(s.get(), &graph);
  if (graph != nullptr) (void)cuGraphDestroy(graph);
  return "end=" + code_str(r) + (graph == nullptr ? "/null" : "");
}

// What a capture forbids, and how the capture ends afterwards (code, and "null" when no graph came back).
std::string case_graph_capture_rules() {
  CUfunction fill = g.function("fill_u32");
  DeviceMemory m = device_alloc(4096);
  Stream s = make_stream();
  std::ostringstream out;
  const auto begin = [&] { CU_CHECK(cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_GLOBAL)); };
  const auto end = [&] {
    CUgraph graph = nullptr;
    const CUresult r = cuStreamEndCapture(s.get(), &graph);
    if (graph != nullptr) (void)cuGraphDestroy(graph);
    return code_str(r) + (graph == nullptr ? "/null" : "");
  };
  begin();
  CU_CHECK(launch(fill, 1, 64, s.get(), m.get(), 1u, 64ULL));
  out << "sync=" << cuStreamSynchronize(s.get()) << "," << end();
  begin();
  CUdeviceptr p = 0;
  const CUresult alloc_global = cuMemAlloc(&p, 4096);
  out << " alloc_global=" << alloc_global << "," << end();
  if (alloc_global == CUDA_SUCCESS) (void)cuMemFree(p);
  begin();
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CU_CHECK(cuThreadExchangeStreamCaptureMode(&mode));
  const CUresult alloc_relaxed = cuMemAlloc(&p, 4096);
  CU_CHECK(cuThreadExchangeStreamCaptureMode(&mode));
  CU_CHECK(launch(fill, 1, 64, s.get(), m.get(), 2u, 64ULL));
  out << " alloc_relaxed=" << alloc_relaxed << "," << end();
  if (alloc_relaxed == CUDA_SUCCESS) (void)cuMemFree(p);
  begin();
  CU_CHECK(launch(fill, 1, 64, s.get(), m.get(), 3u, 64ULL));
  mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CU_CHECK(cuThreadExchangeStreamCaptureMode(&mode));
  const CUresult ctx_sync_relaxed = cuCtxSynchronize();
  CU_CHECK(cuThreadExchangeStreamCaptureMode(&mode));
  out << " ctx_sync_relaxed=" << ctx_sync_relaxed << "," << end();
  CUgraph graph = nullptr;
  out << " end_idle=" << cuStreamEndCapture(s.get(), &graph);
  const CUresult begin_legacy = cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL);
  out << " begin_legacy=" << begin_legacy;
  if (begin_legacy == CUDA_SUCCESS && cuStreamEndCapture(CU_STREAM_LEGACY, &graph) == CUDA_SUCCESS) {
    (void)cuGraphDestroy(graph);
  }
  begin();
  out << " begin_twice=" << cuStreamBeginCapture(s.get(), CU_STREAM_CAPTURE_MODE_GLOBAL) << "," << end();
  size_t count = 0;
  CUgraphNodeType type;
  CUgraphExec exec = nullptr;
  out << " null=" << cuGraphLaunch(nullptr, s.get()) << "," << cuGraphDestroy(nullptr) << ","
      << cuGraphExecDestroy(nullptr) << "," << cuGraphGetNodes(nullptr, nullptr, &count) << ","
      << cuGraphNodeGetType(nullptr, &type) << "," << cuGraphInstantiate(&exec, nullptr, 0);
  CU_CHECK(cuStreamSynchronize(s.get()));
  CU_CHECK(cuCtxSynchronize());
  return out.str() + " recovered=0";
}

// ---------------------------------------------------------------------------------------------
// Errors

// Stale and bogus handles. Destroyed streams and events are not used: the native driver does not
// validate them (cuStreamQuery/cuEventQuery on a destroyed handle segfault on driver 580), so there is
// no native result to compare against. These calls return a defined code natively.
std::string case_error_invalid_handles() {
  g.require_context();
  std::ostringstream out;

  // A module used after cuModuleUnload.
  std::vector<char> ptx = read_file(g.ptx_path);
  ptx.push_back('\0');
  CUmodule module = nullptr;
  CU_CHECK(cuModuleLoadData(&module, ptx.data()));
  CU_CHECK(cuModuleUnload(module));
  CUfunction f = nullptr;
  out << "unloaded_module=" << code_str(cuModuleGetFunction(&f, module, "vector_add")) << ","
      << code_str(cuModuleUnload(module));

  out << " null_function=" << code_str(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));

  // Elapsed time between events that were never recorded, and between timing-disabled events.
  Event a = make_event(), b = make_event();
  float ms = 0;
  out << " unrecorded_events=" << code_str(cuEventElapsedTime(&ms, a.get(), b.get()));
  Event c = make_event(CU_EVENT_DISABLE_TIMING), d = make_event(CU_EVENT_DISABLE_TIMING);
  CU_CHECK(cuEventRecord(c.get(), nullptr));
  CU_CHECK(cuEventRecord(d.get(), nullptr));
  CU_CHECK(cuEventSynchronize(d.get()));
  out << " untimed_events=" << code_str(cuEventElapsedTime(&ms, c.get(), d.get()));

  // A destroyed context.
  CUcontext created = nullptr, popped = nullptr;
  CU_CHECK(cuCtxCreate(&created, nullptr, 0, g.device));
  CU_CHECK(cuCtxPopCurrent(&popped));
  CU_CHECK(cuCtxDestroy(created));
  unsigned api_version = 0;
  out << " destroyed_ctx=" << code_str(cuCtxGetApiVersion(created, &api_version));
  CU_CHECK(cuCtxSetCurrent(g.primary));

  // Freed and never-allocated device pointers, a device ordinal that does not exist.
  CUdeviceptr p = 0;
  CU_CHECK(cuMemAlloc(&p, 4096));
  CU_CHECK(cuMemFree(p));
  out << " double_free=" << code_str(cuMemFree(p));
  char host[16];
  out << " bogus_copy=" << code_str(cuMemcpyDtoH(host, 0xdeadbeef000ULL, sizeof host));
  int value = 0;
  out << " bad_device=" << code_str(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 99));
  return out.str();
}

std::string case_error_alloc_1pib() {
  g.require_context();
  CUdeviceptr p = 0;
  const CUresult huge = cuMemAlloc(&p, size_t{1} << 50);
  if (huge == CUDA_SUCCESS) (void)cuMemFree(p);
  DeviceMemory small = device_alloc(4096);  // the failure must not stick
  return code_str(huge) + " then=0";
}

std::string case_error_unknown_function() {
  g.require_context();
  if (!g.module.get()) throw std::runtime_error("no_module");
  CUfunction f = nullptr;
  const CUresult r = cuModuleGetFunction(&f, g.module.get(), "no_such_kernel");
  CUdeviceptr p = 0;
  size_t bytes = 0;
  const CUresult global = cuModuleGetGlobal(&p, &bytes, g.module.get(), "no_such_global");
  return code_str(r) + " global=" + code_str(global);
}

std::string case_error_names() {
  const int codes[] = {0, 1, 2, 3, 4, 100, 101, 200, 201, 209, 218, 300, 400, 401, 500, 600, 700, 701, 716, 719, 999};
  std::string names;
  Fnv1a strings;
  for (int code : codes) {
    const char* name = nullptr;
    const char* text = nullptr;
    CU_CHECK(cuGetErrorName(static_cast<CUresult>(code), &name));
    CU_CHECK(cuGetErrorString(static_cast<CUresult>(code), &text));
    names += (names.empty() ? "" : ",") + std::string(name ? name : "null");
    strings.add_string(text ? text : "null");
  }
  // An unknown code: both calls reject it and leave the output NULL.
  const char* name = "unchanged";
  const char* text = "unchanged";
  const CUresult bad_name = cuGetErrorName(static_cast<CUresult>(12345), &name);
  const CUresult bad_text = cuGetErrorString(static_cast<CUresult>(12345), &text);
  return names + " strings=" + strings.hex() + " unknown=" + code_str(bad_name) + "/" +
         (name ? "set" : "null") + "," + code_str(bad_text) + "/" + (text ? "set" : "null");
}

// An invalid launch (2048 threads per block). Natively the launch itself fails; a remoting layer may
// defer the error to the next synchronization. Print the first non-success code of {launch, sync},
// then check that the context still works.
std::string case_error_launch_block_2048() {
  CUfunction empty = g.function("empty_kernel");
  Stream s = make_stream();
  const CUresult launched = cuLaunchKernel(empty, 1, 1, 1, 2048, 1, 1, 0, s.get(), nullptr, nullptr);
  const CUresult synced = cuStreamSynchronize(s.get());
  const CUresult first = launched != CUDA_SUCCESS ? launched : synced;
  CU_CHECK(launch(empty, 1, 32, s.get()));
  CU_CHECK(cuStreamSynchronize(s.get()));
  return "first_error=" + code_str(first) + " recovered=0";
}

// ---------------------------------------------------------------------------------------------
// Threads

std::string case_multithreaded() {
  CUfunction fill = g.function("fill_u32");
  constexpr int kThreads = 4, kIterations = 16;
  constexpr unsigned long long kElements = 1 << 20;
  std::array<std::string, kThreads> digests, errors;
  std::array<bool, kThreads> values_ok{};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        CU_CHECK(cuCtxSetCurrent(g.primary));
        Stream s = make_stream();
        DeviceMemory m = device_alloc(sizeof(unsigned) * kElements);
        std::vector<unsigned> host(kElements);
        Fnv1a f;
        bool ok = true;
        for (int i = 0; i < kIterations; ++i) {
          const unsigned value = 0x10000u * (t + 1) + i;
          CU_CHECK(launch(fill, blocks_for(kElements, 256), 256, s.get(), m.get(), value, kElements));
          CU_CHECK(cuMemcpyDtoHAsync(host.data(), m.get(), sizeof(unsigned) * kElements, s.get()));
          CU_CHECK(cuStreamSynchronize(s.get()));
          ok = ok && std::all_of(host.begin(), host.end(), [value](unsigned v) { return v == value; });
          f.add(host.data(), sizeof(unsigned) * kElements);
        }
        digests[t] = f.hex();
        values_ok[t] = ok;
      } catch (const DriverError& e) {
        errors[t] = "error:" + error_name(e.code());
      } catch (const std::exception& e) {
        errors[t] = "exception:" + sanitize(e.what());
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    if (!errors[t].empty()) return "thread" + std::to_string(t) + ":" + errors[t];
  }
  Fnv1a combined;
  for (const auto& d : digests) combined.add_string(d);
  const bool ok = std::all_of(values_ok.begin(), values_ok.end(), [](bool b) { return b; });
  return (ok ? "ok " : "mismatch ") + combined.hex();
}

// ---------------------------------------------------------------------------------------------
// The sticky fault (must be last: it ruins the context).

std::string case_sticky_fault() {
  CUfunction fault = g.function("fault_store");
  const CUdeviceptr bad = 0x10;
  const CUresult launched = launch(fault, 1, 1, nullptr, bad);
  const CUresult synced = cuCtxSynchronize();
  CUdeviceptr p = 0;
  const CUresult alloc = cuMemAlloc(&p, 4096);
  if (alloc == CUDA_SUCCESS) (void)cuMemFree(p);
  return "launch=" + code_str(launched) + " sync=" + code_str(synced) + " alloc=" + code_str(alloc);
}

std::string loaded_libcuda() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuInit), &info) == 0 || info.dli_fname == nullptr) return "unknown";
  return info.dli_fname;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <kernels.ptx> <kernels.cubin> <kernels.fatbin>\n", argv[0]);
    return 2;
  }
  g.ptx_path = argv[1];
  g.cubin_path = argv[2];
  g.fatbin_path = argv[3];
  std::printf("INFO libcuda %s\n", loaded_libcuda().c_str());
  std::fflush(stdout);

  run_case("init", case_init);
  if (!g.initialized) return 1;
  run_case("driver_version", case_driver_version);
  run_case("device_count", case_device_count);
  run_case("device_name", case_device_name);
  run_case("device_total_mem", case_device_total_mem);
  run_case("device_attributes", case_device_attributes);
  run_case("device_uuid", case_device_uuid);
  run_case("primary_ctx", case_primary_ctx);
  run_case("ctx_create_push_pop", case_ctx_create_push_pop);

  run_case("module_ptx", case_module_ptx);
  run_case("module_ptx_jit_options", case_module_ptx_jit_options);
  run_case("module_cubin_file", case_module_cubin_file);
  run_case("module_cubin_data", case_module_cubin_data);
  run_case("module_fatbin", case_module_fatbin);
  run_case("library_fatbin", case_library_fatbin);
  run_case("library_module", case_library_module);
  run_case("context_settings", case_context_settings);
  run_case("host_register", case_host_register);
  run_case("link_ptx", case_link_ptx);
  run_case("potential_block_size", case_potential_block_size);
  run_case("created_memory_pool", case_created_memory_pool);
  run_case("module_global", case_module_global);
  run_case("managed_globals", case_managed_globals);
  run_case("pointer_attribute_widths", case_pointer_attribute_widths);

  run_case("vector_add_n1_b64", [] { return case_vector_add(1, 64); });
  run_case("vector_add_n1000_b96", [] { return case_vector_add(1000, 96); });
  run_case("vector_add_n1048576_b192", [] { return case_vector_add(1 << 20, 192); });
  run_case("param_probe_kernel_params", case_param_probe_kernel_params);
  run_case("param_probe_extra_buffer", case_param_probe_extra_buffer);

  for (size_t n : {size_t{1}, size_t{3}, size_t{4095}, size_t{4096}, size_t{65537}, kMiB + 7, 64 * kMiB, 256 * kMiB}) {
    run_case("copy_sync_" + std::to_string(n), [n] { return case_copy_sync(n); });
  }
  for (size_t n : {size_t{3}, size_t{65537}, kMiB + 7, 64 * kMiB}) {
    run_case("copy_async_pageable_" + std::to_string(n), [n] { return case_copy_async(n, false); });
    run_case("copy_async_pinned_" + std::to_string(n), [n] { return case_copy_async(n, true); });
  }
  run_case("memset_sync", case_memset_sync);
  run_case("memset_async", case_memset_async);

  run_case("stream_flags_priorities", case_stream_flags_priorities);
  run_case("stream_wait_event", case_stream_wait_event);
  run_case("event_elapsed_busy_20ms", case_event_elapsed);
  run_case("stream_query_not_ready", case_stream_query);
  run_case("host_functions_in_stream_order", case_host_functions);

  run_case("virtual_memory_map", case_virtual_memory_map);
  run_case("memcpy_2d_3d", case_memcpy_2d_3d);
  run_case("arrays", case_arrays);
  run_case("graph_capture_replay", case_graph_capture_replay);
  run_case("graph_capture_queries", case_graph_capture_queries);
  run_case("graph_capture_pageable_htod", case_graph_capture_pageable_htod);
  run_case("graph_capture_rules", case_graph_capture_rules);

  run_case("error_invalid_handles", case_error_invalid_handles);
  run_case("error_alloc_1pib", case_error_alloc_1pib);
  run_case("error_unknown_function", case_error_unknown_function);
  run_case("error_names", case_error_names);
  run_case("error_launch_block_2048", case_error_launch_block_2048);

  run_case("multithreaded_4x", case_multithreaded);

  run_case("sticky_fault", case_sticky_fault);
  return 0;
}
