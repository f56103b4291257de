#include "api_common.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "graph.h"

namespace curelay::emulated {

CUresult CurrentContext(std::shared_ptr<Context>* out, bool check_sticky) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  const std::vector<uint64_t>& stack = Driver::ContextStack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  Driver& driver = Driver::Get();
  {
    std::lock_guard lock(driver.mu);
    auto it = driver.contexts.find(stack.back());
    if (it == driver.contexts.end() || !it->second->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = it->second;
  }
  if (check_sticky) return (*out)->sticky();
  return CUDA_SUCCESS;
}

CUresult LookupContext(CUcontext handle, std::shared_ptr<Context>* out) {
  Driver& driver = Driver::Get();
  std::lock_guard lock(driver.mu);
  auto it = driver.contexts.find(HandleValue(handle));
  if (it == driver.contexts.end()) return CUDA_ERROR_INVALID_CONTEXT;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult ResolveStream(CUstream handle, std::shared_ptr<Context>* ctx,
                       std::shared_ptr<Stream>* stream, bool check_sticky) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (IsDefaultStream(handle)) {
    stream->reset();
    return CurrentContext(ctx, check_sticky);
  }
  Driver& driver = Driver::Get();
  {
    std::lock_guard lock(driver.mu);
    auto it = driver.streams.find(HandleValue(handle));
    if (it == driver.streams.end()) {
      return driver.orphaned_streams.count(HandleValue(handle)) != 0 ? CUDA_ERROR_CONTEXT_IS_DESTROYED
                                                                      : CUDA_ERROR_INVALID_HANDLE;
    }
    *stream = it->second;
  }
  *ctx = (*stream)->ctx;
  return check_sticky ? (*ctx)->sticky() : CUDA_SUCCESS;
}

CUresult LookupEvent(CUevent handle, std::shared_ptr<Event>* out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& driver = Driver::Get();
  std::lock_guard lock(driver.mu);
  auto it = driver.events.find(HandleValue(handle));
  if (it == driver.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult LookupModule(CUmodule handle, std::shared_ptr<Module>* out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& driver = Driver::Get();
  std::lock_guard lock(driver.mu);
  auto it = driver.modules.find(HandleValue(handle));
  if (it == driver.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult LookupFunction(CUfunction handle, std::shared_ptr<Function>* out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& driver = Driver::Get();
  std::lock_guard lock(driver.mu);
  auto it = driver.functions.find(HandleValue(handle));
  if (it == driver.functions.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult ValidateDeviceRange(uint64_t addr, size_t bytes, std::shared_ptr<Allocation>* pin) {
  Driver& driver = Driver::Get();
  if (auto allocation = driver.memory().Find(addr, bytes)) {
    *pin = std::move(allocation);
    return CUDA_SUCCESS;
  }
  // A graph's allocation (mapped only while it lives) is device memory to the nodes and captured work that use it.
  if (auto block = GraphAllocationBlock(addr, bytes)) {
    *pin = std::move(block);
    return CUDA_SUCCESS;
  }
  pin->reset();
  return driver.host().Contains(addr, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

uint64_t SubmitOp(const std::shared_ptr<Context>& ctx, Stream* stream, std::function<CUresult()> op,
                  bool even_if_faulted) {
  auto task = [ctx, op = std::move(op), even_if_faulted] {
    if (ctx->sticky() != CUDA_SUCCESS) {
      if (even_if_faulted) op();
      return;
    }
    if (CUresult r = op(); r != CUDA_SUCCESS) ctx->Poison(r);
  };
  return ctx->worker->Submit(std::move(task),
                             {&ctx->last_seq, stream != nullptr ? &stream->last_seq : nullptr});
}

CUresult WaitAndCheck(const std::shared_ptr<Context>& ctx, uint64_t seq) {
  ctx->worker->Wait(seq);
  return ctx->sticky();
}

std::optional<std::chrono::milliseconds> StreamWaitLimit() {
  const char* env = std::getenv("CURELAY_EMU_STREAM_WAIT_LIMIT_MS");
  if (env == nullptr || *env == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long ms = std::strtoull(env, &end, 10);
  // Whole milliseconds up to a day: no sign, nothing after the digits, no overflow later in nanoseconds.
  if (*env < '0' || *env > '9' || *end != '\0' || errno != 0 || ms > 86'400'000ull) {
    std::fprintf(stderr, "curelay emulated driver: bad CURELAY_EMU_STREAM_WAIT_LIMIT_MS=%s; waits are unbounded\n", env);
    return std::nullopt;
  }
  return std::chrono::milliseconds(ms);
}

}  // namespace curelay::emulated
