// The backend's front door: verifies each client's Hello, admits it, hands it an executor of its own and
// answers with that executor's endpoint. After this one exchange the client never talks to the broker again.
#pragma once

#include <atomic>
#include <deque>
#include <mutex>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/admin/admin_service.h"
#include "backend/dispatch/dispatch_service.h"
#include "backend/executor_pool.h"
#include "backend/metrics/metrics_server.h"
#include "backend/quota/memory_quota_board.h"
#include "backend/residency/residency_service.h"
#include "backend/tenants/tenant_registry.h"
#include "transport/listener.h"

namespace curelay::backend {

struct BrokerSettings {
  std::vector<std::string> listen_endpoints;
  ExecutorSettings executors;
  int pending_timeout_ms = 60000;  // a Hello waits this long for an executor before it is refused
  bool allow_anonymous = false;    // admit clients without a tenant token
  std::vector<std::string> admin_endpoints;  // ipc:// (created owner-only) and tcp:// (admin token required)
  std::string metrics_listen;                // host:port of the Prometheus endpoint; empty: none
  std::string admin_token_sha256;
  scheduler::SchedulerConfig scheduling;
  int usage_interval_s = 300;  // the usage ledger's interval: a row per tenant per interval
  // Where executors publish the CUDA IPC handles their sessions export (owner-only, in the state directory);
  // empty: CUDA IPC is refused.
  std::string ipc_registry;
  // Restarts (docs/operations.md): how long a session outlives its backend waiting for a new one, and whether
  // SIGTERM leaves serving sessions running for the next backend (live restore).
  int64_t orphan_grace_ms = 300'000;
  bool live_restore = false;
  transport::CurveKeys curve;  // the server's pair: CURVE on every tcp socket; none: plaintext
  ResidencySettings residency;  // memory turns ([swap]; docs/scheduling.md)
};

class Broker {
 public:
  Broker(BrokerSettings settings, std::unique_ptr<TenantRegistry> registry);
  // Runs until `stop` becomes true. Returns false if the endpoints cannot be bound.
  bool Run(const std::atomic<bool>& stop);

 private:
  struct PendingHello {
    transport::ListenerRequest request;
    int64_t deadline_ms = 0;
    SessionInfo session;
    ExecutorKind kind;  // the tenant's GPUs (empty: every GPU) and spatial sharing
    std::string curve_key;  // the client's CURVE public key, for its executor's gate
  };

  // Takes the runtime directory (one backend at a time), reopens or creates the boards and the adoption socket; a
  // previous backend's boards keep its live sessions' accounts until their executors ask to be adopted.
  bool OpenSharedState(std::string* error);
  // Accepts executors of an earlier backend on the adoption socket and adopts or refuses each; settles the
  // accounts of sessions whose executors did not come back in time.
  void ServeAdoptions();
  // Empty when `adoption` (from executor `pid`, over `fd`) is taken over; otherwise why not.
  std::string Adopt(const SessionRecord& adoption, pid_t pid, int fd);
  void HandleHello(transport::ListenerRequest request);
  void ServePending();
  void Refuse(const transport::ListenerRequest& request, CUresult result, const std::string& message);
  void Admit(const PendingHello& hello, ExecutorProcess& executor);
  // Sessions of `tenant` serving or waiting for an executor.
  size_t SessionsOf(const std::string& tenant) const;
  void ServeAdmin();
  // CURVE handshakes the listeners saw fail, logged at most once per 10 s with a count.
  void LogHandshakeFailures();
  int64_t handshake_log_ms_ = 0;
  size_t handshake_failures_unlogged_ = 0;
  // Writes a tenant's limits onto its quota account (running sessions see them at their next allocation).
  void TenantChanged(const std::string& name);
  // The tenant's account on the quota board, assigned on first use; -1 when the board is full.
  int TenantSlot(const std::string& name);
  int TakeSessionSlot(int tenant_slot);
  nlohmann::json Stats();
  // A tenant's memory turns: its sessions swapped out now, and swaps and their time since the backend started.
  struct TenantSwapFigures {
    uint64_t swapped_out = 0;
    uint64_t swap_outs = 0;
    uint64_t swap_ins = 0;
    double swap_seconds = 0;
  };
  TenantSwapFigures SwapFiguresOf(int tenant_slot);
  std::map<int, TenantSwapFigures> ended_swaps_;  // by tenant slot: what its ended sessions did
  // Each host GPU's scheduled utilization and busy time, for backendctl stats and the metrics endpoint.
  std::vector<GpuMetrics> GpuFigures();
  // Rebuilds the snapshot the metrics endpoint serves (on the broker's thread, about once a second).
  void RefreshMetrics();
  // Closes the usage ledger's interval: each active tenant's GPU seconds and peak memory in it, into the registry.
  void RecordUsage();
  // Puts each tenant's GPU time not yet in the ledger on the quota board, for a backend that follows a crash.
  void KeepUnrecordedUsage();
  int64_t usage_kept_ms_ = 0;

  BrokerSettings settings_;
  std::unique_ptr<TenantRegistry> registry_;
  std::unique_ptr<transport::Listener> listener_;
  std::unique_ptr<transport::Listener> admin_listener_;
  ExecutorPool pool_;
  AdminService admin_;
  std::deque<PendingHello> pending_;
  int runtime_lock_fd_ = -1;
  int adoption_fd_ = -1;
  std::string adoption_socket_;
  struct AdoptionRequest {
    int fd = -1;
    int64_t deadline_ms = 0;
  };
  std::vector<AdoptionRequest> adoption_requests_;
  // Session slots a previous backend left to executors still alive, kept until each is adopted or this deadline.
  std::map<int, int64_t> awaiting_adoption_;
  std::unique_ptr<MemoryQuotaBoard> quota_board_;
  DispatchService dispatch_{settings_.scheduling};
  std::unique_ptr<ResidencyService> residency_;  // memory turns, on the quota board
  std::mutex metrics_mutex_;
  MetricsSnapshot metrics_;  // guarded by metrics_mutex_: read by the metrics server's threads
  int64_t metrics_refreshed_ms_ = 0;
  int64_t usage_interval_start_ = 0;                 // unix seconds
  std::map<std::string, double> usage_recorded_gpu_;  // GPU seconds already in the ledger, by tenant
  std::unique_ptr<MetricsServer> metrics_server_;
  std::map<std::string, int> tenant_slots_;
  std::vector<bool> session_slot_used_ = std::vector<bool>(kMaxQuotaSessions, false);
};

}  // namespace curelay::backend
