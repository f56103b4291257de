// The scheduler at work in the backend: a thread that drains the executors' reports from the dispatch board into
// scheduler::Scheduler, lets time pass (slices rotate), and writes the grants that changed back onto the board,
// every 100 us. The broker tells it about tenants and sessions; backendctl and the metrics endpoint read figures.
// A session is scheduled on each GPU it can use separately (a lane per GPU): each GPU has its own turns, budgets
// and precedence, as the scheduler keeps one GpuScheduler per GPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/dispatch/dispatch_board.h"
#include "backend/metrics/metrics_snapshot.h"
#include "backend/tenants/tenant_record.h"
#include "scheduler/busy_window.h"
#include "scheduler/scheduler.h"

namespace curelay::backend {

class DispatchService {
 public:
  explicit DispatchService(const scheduler::SchedulerConfig& config) : scheduler_(config) {}
  ~DispatchService() { Stop(); }

  // Opens the board at `board_path` (a previous backend's, kept for the sessions this one adopts, or a new one)
  // and starts the thread.
  bool Start(const std::string& board_path, std::string* error);
  void Stop();
  const std::string& board_path() const { return board_->path(); }

  // Adds a tenant or applies its changed class and weight (at the GPU's next decision).
  void SetTenant(const TenantRecord& tenant);
  // A tenant session on dispatch slot `slot`, able to use host GPUs `gpus`; false with `error` when the scheduler
  // refuses it.
  bool OpenSession(uint64_t session, const std::string& tenant, int slot, const std::vector<int>& gpus,
                   std::string* error);
  void CloseSession(uint64_t session);

  struct TenantFigures {
    double gpu_seconds = 0;      // since the backend started
    uint64_t kernels = 0;
    double share = 0;            // of all tenants' GPU time
    double queue_wait_p50_ms = 0;
    double queue_wait_p99_ms = 0;
    uint64_t queue_wait_samples = 0;
    double active_seconds = 0;   // with work pending or in flight, summed over GPUs, since the backend started
    QueueWaitHistogram queue_wait;  // every dispatch since the backend started
  };
  std::optional<TenantFigures> Figures(const std::string& tenant);
  // Fraction of the last second host GPU `gpu` was running scheduled work, as its completion reports cover it
  // (each piece from its report back by its GPU time; overlapping pieces count once: the GPU time-slices two
  // tenants' kernels, and each is timed with the other's share inside).
  double Utilization(int gpu);
  // GPU time of all scheduled work completed on host GPU `gpu` since the backend started, summed as tenants are
  // charged (overlapping pieces each count, so it can grow faster than the wall clock).
  double BusySeconds(int gpu);
  // How long host GPU `gpu` has been saturated (turns applied) since the backend started, and how many times it
  // became so; zero before any tenant session used it.
  std::pair<double, uint64_t> Saturation(int gpu);

 private:
  struct OpenedSession {
    int slot = -1;
    scheduler::TenantId tenant = 0;
    std::vector<int> gpus;
  };
  // The scheduler's session id of a session's lane on one GPU.
  static uint64_t Lane(uint64_t session, int gpu) { return session * kMaxDispatchGpus + static_cast<uint64_t>(gpu); }
  void Loop();
  void Drain(uint64_t session, const OpenedSession& opened, scheduler::TimePoint now);

  std::mutex mutex_;  // guards everything below (the thread and the broker both use the scheduler)
  scheduler::Scheduler scheduler_;
  std::unique_ptr<DispatchBoard> board_;
  std::map<std::string, scheduler::TenantId> tenant_ids_;
  std::map<uint64_t, OpenedSession> sessions_;
  std::map<scheduler::TenantId, QueueWaitHistogram> queue_waits_;
  struct GpuBusy {
    int64_t total_ns = 0;  // GPU time completed (charged), summed: overlapping pieces each count
    // What the last second's completed pieces covered, overlaps once: utilization.
    scheduler::BusyWindow last_second{std::chrono::seconds(1)};
  };
  GpuBusy busy_[kMaxDispatchGpus];
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace curelay::backend
