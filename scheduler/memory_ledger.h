// Per-tenant GPU memory accounting against quotas, and the queue of requests that wait for GPU memory.
//
// The caller (the backend, later) reserves before it allocates for real: Reserve answers from the quota alone.
// When the quota allowed it but the real allocation failed because the GPU is short, the caller reports that and
// the tenant's MemoryPolicy decides: fail now, or wait for a Release on that GPU (then the caller retries) until
// the tenant's wait_timeout passes (then it fails). A waiting request keeps its reservation, so the retry needs
// no new Reserve; whenever a request finally fails the ledger gives its reservation back itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "scheduler/clock.h"
#include "scheduler/ids.h"
#include "scheduler/memory_policy.h"
#include "scheduler/tenant_limits.h"

namespace curelay::scheduler {

enum class ReserveResult : uint8_t {
  kGranted,
  kOverQuota,  // becomes CUDA_ERROR_OUT_OF_MEMORY for the client
  kUnknownSession,
};

enum class ShortAction : uint8_t {
  kFail,  // fail the allocation; its reservation has been given back
  kWait,  // the request is queued; watch TakeResolutions for its retry or its timeout
};

struct ShortVerdict {
  ShortAction action = ShortAction::kFail;
  WaitId wait_id = 0;    // when kWait
  TimePoint deadline{};  // when kWait: the request fails if no retry succeeds by then
};

enum class WaitOutcome : uint8_t {
  kRetry,     // memory was released on the request's GPU: retry the real allocation, then report how it went
  kTimedOut,  // the deadline passed: fail the allocation; its reservation has been given back
};

struct WaitResolution {
  WaitId wait_id = 0;
  SessionId session = 0;
  uint64_t bytes = 0;
  WaitOutcome outcome = WaitOutcome::kRetry;
};

class MemoryLedger {
 public:
  // Adds the tenant or updates its quota and GPU-short policy. A quota below current use frees nothing; it only
  // refuses reservations until use drops below it. Waiting requests keep the deadline they were given.
  void SetTenantLimits(TenantId tenant, const TenantLimits& limits);
  // Forgets the tenant; its sessions should be removed first (any left are dropped silently).
  void RemoveTenant(TenantId tenant);

  // A session's memory lives on one GPU and counts against its tenant's quota. False: unknown tenant, or the
  // session is already known.
  bool AddSession(SessionId session, TenantId tenant, GpuIndex gpu);
  // The session's context is gone and the driver freed its memory: drops its waits and releases what it held,
  // which wakes requests waiting on its GPU.
  void RemoveSession(SessionId session);

  ReserveResult Reserve(SessionId session, uint64_t bytes);
  // Memory freed on the session's GPU: its bytes leave the quota and every request waiting on that GPU is told
  // to retry. Releasing more than the session holds releases what it holds.
  void Release(SessionId session, uint64_t bytes);

  // The real allocation of `bytes`, reserved earlier, failed because the GPU is short.
  ShortVerdict ReportGpuShort(SessionId session, uint64_t bytes, TimePoint now);
  // A retry after kRetry failed again: the request waits again with its original deadline, or fails if that
  // has passed.
  ShortVerdict RetryFailed(WaitId wait, TimePoint now);
  // A retry after kRetry got the memory: the request is done and its reservation is now a real allocation.
  bool RetrySucceeded(WaitId wait);

  // Time passed: queued requests whose deadline is at or before `now` time out.
  void Tick(TimePoint now);
  // Retries and timeouts decided since the last call, oldest first.
  std::vector<WaitResolution> TakeResolutions();

  uint64_t TenantUsedBytes(TenantId tenant) const;
  uint64_t TenantQuotaBytes(TenantId tenant) const;
  uint64_t SessionUsedBytes(SessionId session) const;
  // Requests waiting for a Release (not those told to retry and not yet reported back).
  size_t QueuedWaits() const;

 private:
  struct TenantAccount {
    uint64_t quota_bytes = 0;
    MemoryPolicy on_gpu_short = MemoryPolicy::kFail;
    Duration wait_timeout{0};
    uint64_t used_bytes = 0;
  };
  struct SessionAccount {
    TenantId tenant = 0;
    GpuIndex gpu = 0;
    uint64_t used_bytes = 0;
  };
  struct Wait {
    SessionId session = 0;
    uint64_t bytes = 0;
    TimePoint deadline{};
    bool queued = true;  // false once told to retry, until the caller reports the retry's result
  };

  // Takes bytes off the session and its tenant without waking anyone: memory that was never really allocated.
  void GiveBack(SessionAccount& session, uint64_t bytes);
  ShortVerdict Fail(std::map<WaitId, Wait>::iterator wait);

  std::map<TenantId, TenantAccount> tenants_;
  std::map<SessionId, SessionAccount> sessions_;
  std::map<WaitId, Wait> waits_;  // ordered by id, so by arrival
  WaitId next_wait_id_ = 1;
  std::vector<WaitResolution> resolutions_;
};

}  // namespace curelay::scheduler
