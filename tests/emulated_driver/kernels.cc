#include "kernels.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "api_common.h"

namespace curelay::emulated {
namespace {

// Number of threads that share the same x coordinates (blockIdx.x,
// threadIdx.x). The test kernels index by x only, so these threads run the
// same code on the same element.
uint64_t YzMultiplicity(const LaunchShape& s) {
  return uint64_t{s.grid.y} * s.grid.z * s.block.y * s.block.z;
}

// Calls fn(i, multiplicity) for every active thread of a kernel doing
//   int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) ...
// with the GPU's 32-bit wrap-around. When the x extent fits in a
// non-negative int the active indices are exactly [0, min(n, extent)) and
// are visited without walking idle threads; otherwise every x thread is
// walked. Stops early when fn returns false (a fault).
template <typename Fn>
void ForEachIndex32(const LaunchShape& s, int32_t n, Fn&& fn) {
  const uint64_t extent = uint64_t{s.grid.x} * s.block.x;
  const uint64_t multiplicity = YzMultiplicity(s);
  if (extent <= uint64_t{INT32_MAX} + 1) {
    const int64_t end = std::min<int64_t>(n, static_cast<int64_t>(extent));
    for (int64_t i = 0; i < end; ++i) {
      if (!fn(static_cast<int32_t>(i), multiplicity)) return;
    }
    return;
  }
  for (uint32_t bx = 0; bx < s.grid.x; ++bx) {
    for (uint32_t tx = 0; tx < s.block.x; ++tx) {
      const auto i = static_cast<int32_t>(bx * s.block.x + tx);
      if (i < n && !fn(i, multiplicity)) return;
    }
  }
}

CUresult VectorAdd(KernelContext& k) {
  const auto a = k.args.Get<uint64_t>(0);
  const auto b = k.args.Get<uint64_t>(1);
  const auto c = k.args.Get<uint64_t>(2);
  const auto n = k.args.Get<int32_t>(3);
  ForEachIndex32(k.shape, n, [&](int32_t i, uint64_t) {
    const uint64_t off = static_cast<uint64_t>(static_cast<int64_t>(i) * 4);
    float x, y;
    return k.memory.Load(a + off, &x) && k.memory.Load(b + off, &y) &&
           k.memory.Store(c + off, x + y);
  });
  return k.memory.fault();
}

CUresult FillU32(KernelContext& k) {
  const auto p = k.args.Get<uint64_t>(0);
  const auto value = k.args.Get<uint32_t>(1);
  const auto n = k.args.Get<uint64_t>(2);
  // 64-bit index: no wrap-around, active threads are [0, min(n, extent)).
  const uint64_t extent = uint64_t{k.shape.grid.x} * k.shape.block.x;
  const uint64_t end = std::min(n, extent);
  if (end == 0) return CUDA_SUCCESS;
  // Common case: the whole range is in one block, fill it at memset speed.
  if (p % 4 == 0 && end <= SIZE_MAX / 4) {
    if (uint8_t* dst = k.memory.TryResolveRange(p, end * 4)) {
      std::fill_n(reinterpret_cast<uint32_t*>(dst), end, value);
      return CUDA_SUCCESS;
    }
  }
  for (uint64_t i = 0; i < end; ++i) {
    if (!k.memory.Store(p + i * 4, value)) break;
  }
  return k.memory.fault();
}

CUresult IncrementI32(KernelContext& k) {
  const auto p = k.args.Get<uint64_t>(0);
  const auto n = k.args.Get<int32_t>(1);
  ForEachIndex32(k.shape, n, [&](int32_t i, uint64_t multiplicity) {
    const uint64_t addr = p + static_cast<uint64_t>(static_cast<int64_t>(i) * 4);
    uint32_t v;
    if (!k.memory.Load(addr, &v)) return false;
    // Threads differing only in y/z race on the same element; applying every
    // increment is one of the outcomes the GPU can produce.
    return k.memory.Store(addr, static_cast<uint32_t>(v + multiplicity));
  });
  return k.memory.fault();
}

CUresult BusyWaitNs(KernelContext& k) {
  // Only thread (0,0,0) of block (0,0,0) waits; it always exists.
  // At most an hour (a larger count would overflow the clock), or the watchdog's limit where one is set.
  const auto limit = StreamWaitLimit();
  const uint64_t most = limit.has_value() ? std::chrono::nanoseconds(*limit).count() : 3'600'000'000'000ull;
  const uint64_t ns = k.args.Get<uint64_t>(0);
  std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(ns, most)));
  return ns > most && limit.has_value() ? CUDA_ERROR_LAUNCH_TIMEOUT : CUDA_SUCCESS;
}

CUresult ParamProbe(KernelContext& k) {
  // Threads with blockIdx.x == 0 && threadIdx.x == 0 all write the same
  // words; one write is indistinguishable from several.
  uint64_t words[11];
  words[0] = k.args.Get<uint8_t>(0);
  words[1] = k.args.Get<uint16_t>(1);
  words[2] = k.args.Get<uint32_t>(2);
  words[3] = k.args.Get<uint64_t>(3);
  words[4] = k.args.Get<uint32_t>(4);  // float bits
  words[5] = k.args.Get<uint64_t>(5);  // double bits
  const uint8_t* s = k.args.Raw(6);    // struct ProbeStruct { char c; double d; int i[3]; }
  int8_t c;
  uint64_t d;
  int32_t i[3];
  std::memcpy(&c, s + 0, sizeof(c));
  std::memcpy(&d, s + 8, sizeof(d));
  std::memcpy(i, s + 16, sizeof(i));
  words[6] = static_cast<uint64_t>(int64_t{c});
  words[7] = d;
  for (int j = 0; j < 3; ++j) words[8 + j] = static_cast<uint64_t>(int64_t{i[j]});
  const auto out = k.args.Get<uint64_t>(7);
  for (int j = 0; j < 11; ++j) {
    if (!k.memory.Store(out + 8 * static_cast<uint64_t>(j), words[j])) break;
  }
  return k.memory.fault();
}

CUresult FaultStore(KernelContext& k) {
  // Every thread stores the same value to the same address.
  k.memory.Store<int32_t>(k.args.Get<uint64_t>(0), 0x0badf00d);
  return k.memory.fault();
}

CUresult AddToGlobal(KernelContext& k) {
  // Atomic adds commute: the result is v times the number of threads.
  const auto v = k.args.Get<uint32_t>(0);
  const uint64_t threads =
      uint64_t{k.shape.grid.x} * k.shape.block.x * YzMultiplicity(k.shape);
  const uint64_t addr = k.globals.at("global_counter");
  uint32_t counter;
  if (!k.memory.Load(addr, &counter)) return k.memory.fault();
  counter += static_cast<uint32_t>(v * threads);
  k.memory.Store(addr, counter);
  return k.memory.fault();
}

CUresult EmptyKernel(KernelContext&) { return CUDA_SUCCESS; }

const std::vector<KernelBinding>& Bindings() {
  static const std::vector<KernelBinding> bindings = {
      {"vector_add", {{0, 8}, {8, 8}, {16, 8}, {24, 4}}, {}, &VectorAdd},
      {"fill_u32", {{0, 8}, {8, 4}, {16, 8}}, {}, &FillU32},
      {"increment_i32", {{0, 8}, {8, 4}}, {}, &IncrementI32},
      {"busy_wait_ns", {{0, 8}}, {}, &BusyWaitNs},
      {"param_probe",
       {{0, 1}, {2, 2}, {4, 4}, {8, 8}, {16, 4}, {24, 8}, {32, 32}, {64, 8}},
       {},
       &ParamProbe},
      {"fault_store", {{0, 8}}, {}, &FaultStore},
      {"add_to_global", {{0, 4}}, {{"global_counter", 4}}, &AddToGlobal},
      {"empty_kernel", {}, {}, &EmptyKernel},
  };
  return bindings;
}

}  // namespace

const KernelBinding* FindKernelBinding(const KernelInfo& kernel, const ModuleImage& image) {
  for (const KernelBinding& b : Bindings()) {
    if (b.name != kernel.name || b.params.size() != kernel.params.size()) continue;
    bool same_layout = true;
    for (size_t i = 0; i < b.params.size(); ++i) {
      same_layout &= b.params[i].offset == kernel.params[i].offset &&
                     b.params[i].size == kernel.params[i].size;
    }
    if (!same_layout) return nullptr;
    for (const auto& global : b.globals) {
      const std::string_view name = global.first;  // not a structured binding: clang before 16 cannot capture one
      const size_t min_size = global.second;
      auto it = std::find_if(image.globals.begin(), image.globals.end(),
                             [&](const GlobalInfo& g) { return g.name == name; });
      if (it == image.globals.end() || it->size < min_size) return nullptr;
    }
    return &b;
  }
  return nullptr;
}

}  // namespace curelay::emulated
