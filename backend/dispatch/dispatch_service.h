// The scheduler at work in the backend: a thread that drains the executors' reports from the dispatch board into
// scheduler::Scheduler, lets time pass (slices rotate), and writes the grants that changed back onto the board,
// every 100 us. The broker tells it about tenants and sessions; backendctl and the metrics endpoint read figures.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "backend/dispatch/dispatch_board.h"
#include "backend/metrics/metrics_snapshot.h"
#include "backend/tenants/tenant_record.h"
#include "scheduler/scheduler.h"

namespace curelay::backend {

class DispatchService {
 public:
  explicit DispatchService(const scheduler::SchedulerConfig& config) : scheduler_(config) {}
  ~DispatchService() { Stop(); }

  // Creates the board at `board_path` and starts the thread.
  bool Start(const std::string& board_path, std::string* error);
  void Stop();
  const std::string& board_path() const { return board_->path(); }

  // Adds a tenant or applies its changed class and weight (at the GPU's next decision).
  void SetTenant(const TenantRecord& tenant);
  // A tenant session on dispatch slot `slot`; false with `error` when the scheduler refuses it.
  bool OpenSession(uint64_t session, const std::string& tenant, int slot, std::string* error);
  void CloseSession(uint64_t session);

  struct TenantFigures {
    double gpu_seconds = 0;      // since the backend started
    uint64_t kernels = 0;
    double share = 0;            // of all tenants' GPU time
    double queue_wait_p50_ms = 0;
    double queue_wait_p99_ms = 0;
    uint64_t queue_wait_samples = 0;
    QueueWaitHistogram queue_wait;  // every dispatch since the backend started
  };
  std::optional<TenantFigures> Figures(const std::string& tenant);
  // Fraction of the last second the GPU had scheduled work completing, as the scheduler saw it (GPU 0).
  double Utilization();
  // GPU time of all scheduled work completed since the backend started (GPU 0).
  double BusySeconds();

 private:
  void Loop();
  void Drain(uint64_t session, int slot, scheduler::TimePoint now);

  std::mutex mutex_;  // guards everything below (the thread and the broker both use the scheduler)
  scheduler::Scheduler scheduler_;
  std::unique_ptr<DispatchBoard> board_;
  std::map<std::string, scheduler::TenantId> tenant_ids_;
  std::map<uint64_t, int> session_slots_;
  std::map<uint64_t, scheduler::TenantId> session_tenants_;
  std::map<scheduler::TenantId, QueueWaitHistogram> queue_waits_;
  int64_t busy_total_ns_ = 0;
  // GPU time completed, in 100 ms buckets over the last second, for utilization.
  int64_t busy_ns_[10] = {};
  int64_t busy_bucket_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace curelay::backend
