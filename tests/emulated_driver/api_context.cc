// Contexts: primary context retain/release/reset, cuCtxCreate/Destroy and
// the per-thread context stack.
#include <memory>

#include "api_common.h"
#include "context_api.h"
#include "device_properties.h"
#include "graph.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

// The context API version cuCtxGetApiVersion reports: 3020, the version that
// introduced the _v2 (size_t / 64-bit pointer) entry points used here.
constexpr unsigned int kContextApiVersion = 3020;

bool ValidContextFlags(unsigned int flags) {
  if ((flags & ~static_cast<unsigned int>(CU_CTX_FLAGS_MASK)) != 0) return false;
  const unsigned int sched = flags & CU_CTX_SCHED_MASK;
  // At most one scheduling policy.
  return sched == 0 || sched == CU_CTX_SCHED_SPIN || sched == CU_CTX_SCHED_YIELD ||
         sched == CU_CTX_SCHED_BLOCKING_SYNC;
}

}  // namespace

CUresult CreateContext(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                       CUdevice dev) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr || !ValidContextFlags(flags)) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::Get();
  if (CUresult r = driver.CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (params != nullptr) {
    // Execution affinity is only honoured under MPS; CIG needs a graphics
    // client. Neither exists here.
    if (params->execAffinityParams != nullptr && params->numExecAffinityParams > 0) {
      return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    }
    if (params->numExecAffinityParams < 0) return CUDA_ERROR_INVALID_VALUE;
    if (params->cigParams != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto ctx = std::make_shared<Context>(driver.NewHandle(), dev, flags, /*primary=*/false,
                                       &driver.worker(dev));
  {
    std::lock_guard lock(driver.mu);
    driver.contexts.emplace(ctx->handle, ctx);
  }
  Driver::ContextStack().push_back(ctx->handle);
  *pctx = ToHandle<CUcontext>(ctx->handle);
  return CUDA_SUCCESS;
}

}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::Driver& driver = emu::Driver::Get();
    if (CUresult r = driver.CheckDevice(dev); r != CUDA_SUCCESS) return r;
    std::lock_guard lifecycle(driver.lifecycle_mu);
    std::lock_guard lock(driver.mu);
    const auto& ctx = driver.primary_contexts[static_cast<size_t>(dev)];
    if (!ctx->alive) {
      ctx->alive = true;
      ctx->flags = driver.primary_flags[static_cast<size_t>(dev)];
    }
    ++ctx->retain_count;
    *pctx = emu::ToHandle<CUcontext>(ctx->handle);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  return emu::Guard([&] {
    emu::Driver& driver = emu::Driver::Get();
    if (CUresult r = driver.CheckDevice(dev); r != CUDA_SUCCESS) return r;
    std::lock_guard lifecycle(driver.lifecycle_mu);
    std::shared_ptr<emu::Context> ctx;
    {
      std::lock_guard lock(driver.mu);
      ctx = driver.primary_contexts[static_cast<size_t>(dev)];
      if (ctx->retain_count == 0) return CUDA_ERROR_INVALID_CONTEXT;
      if (--ctx->retain_count > 0) return CUDA_SUCCESS;
      ctx->alive = false;
    }
    // The last release resets the context: all its resources go away.
    driver.DestroyContextResources(ctx);
    ctx->sticky_error = CUDA_SUCCESS;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  emu::Driver& driver = emu::Driver::Get();
  if (CUresult r = driver.CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (!emu::ValidContextFlags(flags)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver.mu);
  // Allowed while active since CUDA 11.7; the new flags apply immediately.
  driver.primary_flags[static_cast<size_t>(dev)] = flags;
  const auto& ctx = driver.primary_contexts[static_cast<size_t>(dev)];
  if (ctx->alive) ctx->flags = flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  emu::Driver& driver = emu::Driver::Get();
  if (CUresult r = driver.CheckDevice(dev); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver.mu);
  *flags = driver.primary_flags[static_cast<size_t>(dev)];
  *active = driver.primary_contexts[static_cast<size_t>(dev)]->alive ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) {
  return emu::Guard([&] {
    emu::Driver& driver = emu::Driver::Get();
    if (CUresult r = driver.CheckDevice(dev); r != CUDA_SUCCESS) return r;
    std::lock_guard lifecycle(driver.lifecycle_mu);
    std::shared_ptr<emu::Context> ctx;
    {
      std::lock_guard lock(driver.mu);
      ctx = driver.primary_contexts[static_cast<size_t>(dev)];
    }
    // Destroys all allocations and state; retains are kept, so a retained
    // primary context is immediately usable again (with a clean error state).
    driver.DestroyContextResources(ctx);
    ctx->sticky_error = CUDA_SUCCESS;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, CUctxCreateParams* ctxCreateParams,
                             unsigned int flags, CUdevice dev) {
  return emu::Guard([&] { return emu::CreateContext(pctx, ctxCreateParams, flags, dev); });
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::Driver& driver = emu::Driver::Get();
    std::lock_guard lifecycle(driver.lifecycle_mu);
    std::shared_ptr<emu::Context> context;
    {
      std::lock_guard lock(driver.mu);
      auto it = driver.contexts.find(emu::HandleValue(ctx));
      // Primary contexts are released, never destroyed; a green context's context goes only with
      // cuGreenCtxDestroy.
      if (it == driver.contexts.end() || it->second->primary || it->second->green != 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
      }
      context = it->second;
      context->alive = false;
      driver.contexts.erase(it);
    }
    // Popped from the calling thread only; other threads that still have it
    // current get CUDA_ERROR_CONTEXT_IS_DESTROYED.
    auto& stack = emu::Driver::ContextStack();
    if (!stack.empty() && stack.back() == context->handle) stack.pop_back();
    driver.DestroyContextResources(context);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Context> context;
    if (CUresult r = emu::LookupContext(ctx, &context); r != CUDA_SUCCESS) return r;
    emu::Driver::ContextStack().push_back(context->handle);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext* pctx) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  auto& stack = emu::Driver::ContextStack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  const uint64_t top = stack.back();
  stack.pop_back();
  if (pctx != nullptr) *pctx = emu::ToHandle<CUcontext>(top);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    auto& stack = emu::Driver::ContextStack();
    if (ctx == nullptr) {
      if (!stack.empty()) stack.pop_back();
      return CUDA_SUCCESS;
    }
    std::shared_ptr<emu::Context> context;
    if (CUresult r = emu::LookupContext(ctx, &context); r != CUDA_SUCCESS) return r;
    if (stack.empty()) {
      stack.push_back(context->handle);
    } else {
      stack.back() = context->handle;
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto& stack = emu::Driver::ContextStack();
  *pctx = stack.empty() ? nullptr : emu::ToHandle<CUcontext>(stack.back());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) return r;
    *device = ctx->device;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) return r;
    *flags = ctx->flags;
    return CUDA_SUCCESS;
  });
}

// Only the scheduling and host-map flags may change, as with the driver.
CUresult CUDAAPI cuCtxSetFlags(unsigned int flags) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if ((flags & ~(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST)) != 0) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) return r;
    ctx->flags = flags;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache* config) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) return r;
    *config = ctx->cache_config;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) return r;
    ctx->cache_config = config;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx, /*check_sticky=*/false); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::CheckUnsafeCall(); r != CUDA_SUCCESS) return r;
    return emu::WaitAndCheck(ctx, ctx->last_seq.load());
  });
}

// The emulated device has no L2 to persist lines in; the call needs a current context, as the real driver's does.
CUresult CUDAAPI cuCtxResetPersistingL2Cache(void) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    return emu::CurrentContext(&ctx, /*check_sticky=*/false);
  });
}

// Profiling ranges: there is no profiler to tell, but the calls need a current context, as the real driver's do.
CUresult CUDAAPI cuProfilerStart(void) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> context;
    return emu::CurrentContext(&context, /*check_sticky=*/false);
  });
}

CUresult CUDAAPI cuProfilerStop(void) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> context;
    return emu::CurrentContext(&context, /*check_sticky=*/false);
  });
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<emu::Context> context;
    CUresult r = ctx == nullptr ? emu::CurrentContext(&context, /*check_sticky=*/false)
                                : emu::LookupContext(ctx, &context);
    if (r != CUDA_SUCCESS) return r;
    *version = emu::kContextApiVersion;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  return emu::Guard([&] {
    std::shared_ptr<emu::Context> ctx;
    if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
    if (leastPriority != nullptr) *leastPriority = emu::kLeastStreamPriority;
    if (greatestPriority != nullptr) *greatestPriority = emu::kGreatestStreamPriority;
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
