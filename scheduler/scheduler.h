// The multi-tenant scheduler: the tenant and session registry, one GpuScheduler per GPU, the memory ledger and
// per-tenant statistics, behind one set of events. It has no I/O, threads or clock of its own: the backend feeds it
// events with the current time and publishes what it decides (grants, memory verdicts). Not thread-safe; the
// caller serializes events.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "scheduler/clock.h"
#include "scheduler/dispatch_decision.h"
#include "scheduler/gpu_scheduler.h"
#include "scheduler/grant.h"
#include "scheduler/ids.h"
#include "scheduler/latency_samples.h"
#include "scheduler/scheduler_config.h"
#include "scheduler/status.h"
#include "scheduler/tenant_limits.h"
#include "scheduler/tenant_stats.h"

namespace curelay::scheduler {

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config = {});

  // Tenants. Updates apply at once: class and weight at each GPU's next decision, quota at the next Reserve,
  // max_sessions and gpus at the next OpenSession (open sessions are never closed by an update).
  Status AddTenant(TenantId tenant, const TenantLimits& limits);
  Status UpdateTenant(TenantId tenant, const TenantLimits& limits, TimePoint now);
  // Refused while the tenant has sessions open.
  Status RemoveTenant(TenantId tenant);
  const TenantLimits* FindTenant(TenantId tenant) const;

  // Sessions. Refused when the tenant has max_sessions open or may not use the GPU.
  Status OpenSession(SessionId session, TenantId tenant, GpuIndex gpu, TimePoint now);
  // Drops the session's pending and in-flight work and its memory waits, and releases its memory.
  Status CloseSession(SessionId session, TimePoint now);

  // Work events (see GpuScheduler for the policy).
  Status WorkArrived(SessionId session, TimePoint now, uint64_t count = 1);
  DispatchDecision TryDispatch(SessionId session, KernelKey kernel, TimePoint now);
  DispatchDecision WorkDispatched(SessionId session, KernelKey kernel, TimePoint now,
                                  Duration estimate = Duration::zero());
  Status WorkCompleted(SessionId session, KernelKey kernel, Duration gpu_time, TimePoint now);
  // Time passed: slices whose time is up rotate and memory waits past their deadline time out.
  void Tick(TimePoint now);

  // Grants, for the backend to publish.
  std::optional<Grant> GetGrant(SessionId session) const;
  // Grants that changed since the last call (including those of newly opened sessions), by GPU then session.
  std::vector<SessionGrant> TakeChangedGrants();

  // Statistics since the last ResetStats.
  std::optional<TenantStats> Stats(TenantId tenant) const;
  void ResetStats();

  const GpuScheduler* FindGpu(GpuIndex gpu) const;
  const SchedulerConfig& config() const { return config_; }

 private:
  struct TenantEntry {
    TenantLimits limits;
    uint32_t open_sessions = 0;
    Duration gpu_time{0};
    uint64_t kernels_completed = 0;
    uint64_t kernels_dispatched = 0;
    LatencySamples queue_waits;
  };
  struct SessionEntry {
    TenantId tenant = 0;
    GpuIndex gpu = 0;
  };

  void CountDispatch(const SessionEntry& session, const DispatchDecision& decision);

  SchedulerConfig config_;
  std::map<TenantId, TenantEntry> tenants_;
  std::map<SessionId, SessionEntry> sessions_;
  std::map<GpuIndex, GpuScheduler> gpus_;  // created when the first session opens on the GPU
};

}  // namespace curelay::scheduler
