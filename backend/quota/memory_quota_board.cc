#include "backend/quota/memory_quota_board.h"

#include <sys/mman.h>

#include <new>
#include <type_traits>

#include "transport/shm/shared_file.h"

namespace curelay::backend {
namespace {

constexpr uint64_t kMagic = 0x36647271796c6572;  // "relyqrd6"

}  // namespace

const char* SwapRefusalText(uint32_t refusal) {
  switch (static_cast<SwapRefusal>(refusal)) {
    case SwapRefusal::kNone: return "none";
    case SwapRefusal::kIpcExported: return "it exported memory through CUDA IPC";
    case SwapRefusal::kSeveralGpus: return "its movable memory is on several GPUs";
    case SwapRefusal::kFaulted: return "its context holds a fault";
  }
  return "unknown";
}

uint64_t MemoryQuotaBoard::Layout() { return kMagic; }

MemoryQuotaBoard* MemoryQuotaBoard::Create(const std::string& path, std::string* error) {
  void* mapping = transport::CreateNamedSharedFile(path, sizeof(MemoryQuotaBoardLayout), error);
  if (mapping == nullptr) return nullptr;
  auto* layout = new (mapping) MemoryQuotaBoardLayout{};  // the atomics' initial values
  layout->magic = kMagic;
  return new MemoryQuotaBoard(layout, path);
}

MemoryQuotaBoard* MemoryQuotaBoard::Open(const std::string& path, std::string* error) {
  void* mapping = transport::OpenNamedSharedFile(path, sizeof(MemoryQuotaBoardLayout), error);
  auto* layout = static_cast<MemoryQuotaBoardLayout*>(mapping);
  if (layout == nullptr) return nullptr;
  if (layout->magic != kMagic) {
    munmap(layout, sizeof(MemoryQuotaBoardLayout));
    *error = path + ": not a quota board";
    return nullptr;
  }
  return new MemoryQuotaBoard(layout, path);
}

MemoryQuotaBoard* MemoryQuotaBoard::OpenOrCreate(const std::string& path, bool* reopened, std::string* error) {
  std::string ignored;
  if (MemoryQuotaBoard* board = Open(path, &ignored)) {
    *reopened = true;
    return board;
  }
  *reopened = false;
  return Create(path, error);
}

MemoryQuotaBoard::~MemoryQuotaBoard() { munmap(layout_, sizeof(MemoryQuotaBoardLayout)); }

bool MemoryQuotaBoard::Reserve(int session_slot, uint64_t bytes) {
  SessionMemoryAccount& session = layout_->sessions[session_slot];
  const int tenant_slot = session.tenant.load(std::memory_order_acquire);
  if (tenant_slot < 0 || tenant_slot >= kMaxQuotaTenants) return true;  // a session without a tenant: no quota
  TenantMemoryAccount& tenant = layout_->tenants[tenant_slot];
  uint64_t used = tenant.used.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t quota = tenant.quota.load(std::memory_order_relaxed);
    if (quota != 0 && (bytes > quota || used > quota - bytes)) return false;
    if (tenant.used.compare_exchange_weak(used, used + bytes, std::memory_order_acq_rel)) break;
  }
  // The tenant is charged first: an executor that dies before the next line leaves the tenant over-counted by
  // `bytes` (never under), which Settle cannot see; the session's own count is what Settle returns.
  session.used.fetch_add(bytes, std::memory_order_acq_rel);
  for (std::atomic<uint64_t>* high_water : {&tenant.peak, &tenant.interval_peak}) {
    uint64_t peak = high_water->load(std::memory_order_relaxed);
    while (used + bytes > peak && !high_water->compare_exchange_weak(peak, used + bytes)) {
    }
  }
  return true;
}

void MemoryQuotaBoard::Release(int session_slot, uint64_t bytes) {
  SessionMemoryAccount& session = layout_->sessions[session_slot];
  const int tenant_slot = session.tenant.load(std::memory_order_acquire);
  if (tenant_slot < 0 || tenant_slot >= kMaxQuotaTenants) return;
  session.used.fetch_sub(bytes, std::memory_order_acq_rel);
  layout_->tenants[tenant_slot].used.fetch_sub(bytes, std::memory_order_acq_rel);
}

void MemoryQuotaBoard::Settle(int session_slot) {
  SessionMemoryAccount& session = layout_->sessions[session_slot];
  const int tenant_slot = session.tenant.exchange(-1, std::memory_order_acq_rel);
  const uint64_t held = session.used.exchange(0, std::memory_order_acq_rel);
  session.executor_pid.store(0, std::memory_order_release);
  // Every memory-turns field back to its initial value at once (the executor is gone: nobody else writes them).
  static_assert(std::is_trivially_destructible_v<SessionResidency>);
  new (&session.residency) SessionResidency{};
  if (tenant_slot >= 0 && tenant_slot < kMaxQuotaTenants) {
    layout_->tenants[tenant_slot].used.fetch_sub(held, std::memory_order_acq_rel);
  }
}

}  // namespace curelay::backend
