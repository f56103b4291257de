#include "driver.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "peer_access.h"

namespace curelay::emulated {
namespace {

// Handle values look like (non-dereferenceable) pointers and never repeat.
constexpr uint64_t kHandleBase = 0x00007e5100000000ULL;
constexpr uint64_t kHandleStride = 0x40;

// Parses "<bytes>[K|M|G|T]" (binary multiples).
std::optional<uint64_t> ParseSize(const char* text) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text) return std::nullopt;
  int shift = 0;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: return std::nullopt;
  }
  if (*end != '\0') {
    ++end;
    if (*end == 'i' || *end == 'I') ++end;
    if (*end == 'b' || *end == 'B') ++end;
    if (*end != '\0') return std::nullopt;
  }
  if (shift != 0 && value > (~0ULL >> shift)) return std::nullopt;
  return static_cast<uint64_t>(value) << shift;
}

}  // namespace

Driver& Driver::Get() {
  static Driver* driver = new Driver();
  return *driver;
}

CUresult Driver::Init(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(init_mu_);
  if (init_attempted_) return init_result_;
  init_attempted_ = true;

  int count = kDefaultDeviceCount;
  if (const char* env = std::getenv("CURELAY_EMU_DEVICE_COUNT"); env != nullptr && *env != '\0') {
    auto parsed = ParseSize(env);
    if (!parsed || *parsed > 64) {
      std::fprintf(stderr, "curelay emulated driver: bad CURELAY_EMU_DEVICE_COUNT=%s\n", env);
      init_result_ = CUDA_ERROR_INVALID_VALUE;
      return init_result_;
    }
    count = static_cast<int>(*parsed);
  }
  size_t memory = kDefaultDeviceMemory;
  if (const char* env = std::getenv("CURELAY_EMU_DEVICE_MEMORY"); env != nullptr && *env != '\0') {
    auto parsed = ParseSize(env);
    if (!parsed || *parsed == 0) {
      std::fprintf(stderr, "curelay emulated driver: bad CURELAY_EMU_DEVICE_MEMORY=%s\n", env);
      init_result_ = CUDA_ERROR_INVALID_VALUE;
      return init_result_;
    }
    memory = *parsed;
  }
  // CUDA_VISIBLE_DEVICES as the driver reads it: ordinals of the GPUs to show, in that order; the list ends at the
  // first entry that names no GPU (or one already listed). The emulated driver takes indices only, not UUIDs.
  std::vector<int> visible;
  for (int d = 0; d < count; ++d) visible.push_back(d);
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES"); env != nullptr) {
    visible.clear();
    std::stringstream entries(env);
    std::string entry;
    while (std::getline(entries, entry, ',')) {
      char* end = nullptr;
      const long d = std::strtol(entry.c_str(), &end, 10);
      if (entry.empty() || *end != '\0' || d < 0 || d >= count ||
          std::find(visible.begin(), visible.end(), d) != visible.end()) {
        break;
      }
      visible.push_back(static_cast<int>(d));
    }
  }
  if (visible.empty()) {
    init_result_ = CUDA_ERROR_NO_DEVICE;
    return init_result_;
  }
  count = static_cast<int>(visible.size());

  device_count_ = count;
  physical_devices_ = visible;
  device_memory_ = memory;
  memory_.Configure(visible, memory);
  if (const char* shared = std::getenv("CURELAY_EMU_SHARED_MEMORY_FILE"); shared != nullptr && *shared != '\0') {
    std::string error;
    if (!memory_.ShareCapacity(shared, &error)) {
      std::fprintf(stderr, "curelay emulated driver: CURELAY_EMU_SHARED_MEMORY_FILE: %s\n", error.c_str());
      init_result_ = CUDA_ERROR_INVALID_VALUE;
      return init_result_;
    }
  }
  {
    std::lock_guard tables(mu);
    for (int d = 0; d < count; ++d) {
      workers_.push_back(std::make_unique<DeviceWorker>(d));
      auto primary = std::make_shared<Context>(NewHandle(), d, 0, /*primary=*/true,
                                               workers_.back().get());
      primary->alive = false;  // inactive until retained
      contexts.emplace(primary->handle, primary);
      primary_contexts.push_back(std::move(primary));
      primary_flags.push_back(0);
    }
  }
  init_result_ = CUDA_SUCCESS;
  initialized_.store(true, std::memory_order_release);
  return init_result_;
}

CUresult Driver::init_status() const {
  // After a failed cuInit only cuInit itself repeats the failure; every
  // other call reports the driver as not initialized.
  return initialized_.load(std::memory_order_acquire) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

uint64_t Driver::NewHandle() {
  return kHandleBase + (next_handle_.fetch_add(1, std::memory_order_relaxed) + 1) * kHandleStride;
}

void Driver::DestroyContextResources(const std::shared_ptr<Context>& ctx) {
  // The GPU finishes (or, after a fault, abandons) queued work before the
  // context's memory goes away.
  ctx->worker->Wait(ctx->last_seq.load());
  std::vector<std::shared_ptr<Module>> dropped_modules;
  {
    std::lock_guard lock(mu);
    std::erase_if(streams, [&](const auto& e) {
      if (e.second->ctx != ctx) return false;
      if (ctx->green != 0) orphaned_streams.insert(e.first);  // see orphaned_streams
      return true;
    });
    std::erase_if(events, [&](const auto& e) { return e.second->ctx == ctx; });
    std::erase_if(functions, [&](const auto& e) { return e.second->module->ctx == ctx; });
    for (auto it = modules.begin(); it != modules.end();) {
      if (it->second->ctx == ctx) {
        dropped_modules.push_back(std::move(it->second));
        it = modules.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& module : dropped_modules) memory_.ReleaseOwnedBy(module->handle);
  memory_.ReleaseOwnedBy(ctx->handle);
  host_.UnregisterOwnedBy(ctx->handle);
  ForgetPeerAccess(ctx->handle);  // peer grants go with the context, both ways
}

std::vector<uint64_t>& Driver::ContextStack() {
  thread_local std::vector<uint64_t> stack;
  return stack;
}

}  // namespace curelay::emulated
