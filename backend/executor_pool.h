// The executor processes of one backend: starting them (a few ahead of demand, the warm pool), handing one to
// each admitted client, and reaping them when their session ends or they crash.
// An executor is started for a device set: every GPU of the host (the warm pool's), or the GPUs one tenant may
// use, which the driver in that executor alone shows through CUDA_VISIBLE_DEVICES. The driver enforces the
// restriction, renumbers the devices as a process on such a host would see them, and reports only those.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/executor_control.h"
#include "backend/mps_server.h"

namespace curelay::backend {

struct ExecutorSettings {
  std::string executor_path;           // the curelay-executor binary
  std::string driver_path;             // the real libcuda.so.1 the executors load
  std::string nvml_path;               // the host's NVML they read facts from (on a client's question); empty: none
  std::string runtime_dir;             // where ipc session sockets live (containers of same-host clients mount it)
  // What clients must never reach, though they share the runtime directory: the admin socket, the scheduler's and
  // quotas' boards, the MPS pipes. A 0700 subdirectory, which a CDI spec also hides from containers (a container's
  // root would pass the permission check).
  std::string private_dir() const { return runtime_dir + "/private"; }
  std::vector<std::string> tcp_hosts;  // hosts of tcp listen endpoints; executors bind a free port on each
  std::string rdma_host;               // the host of the rdma listen endpoint, if any: executors bind
                                        // rdma://HOST:tcp_ports beside their ipc and tcp endpoints
  bool ipc = true;                     // whether executors bind an ipc endpoint
  std::string log_level = "info";
  std::string tcp_ports = "*";          // the port part of each tcp or rdma bind: "*" (any) or "LOW-HIGH"
  int heartbeat_timeout_ms = 5000;
  size_t warm_pool = 1;
  std::string mps_control;  // nvidia-cuda-mps-control for spatially shared tenants; empty: looked up
  std::string curve_secret_file;  // CURVE: the backend's secret key, which executors use on their tcp sockets
  std::string swap_space;         // memory turns: the swap space executors map (docs/scheduling.md); empty: none
  uint64_t swap_space_bytes = 0;
};

// Who a serving executor's session belongs to (for admission limits, backendctl and metrics).
struct SessionInfo {
  std::string tenant;          // empty: an anonymous session
  uint32_t client_pid = 0;
  std::string client_host;
  std::string client_program;
  int64_t started_unix = 0;
};

// Host GPU indices as the backend numbers them (its own CUDA_VISIBLE_DEVICES order); empty: every GPU.
using DeviceSet = std::vector<int>;

// What an executor is started for: the GPUs it shows, and whether it is a client of the backend's MPS server
// (spatial sharing) with a share of SMs and a memory limit. The warm pool's kind is the default: every GPU, no MPS.
struct ExecutorKind {
  DeviceSet gpus;
  uint32_t mps_sm_percent = 0;  // 0: an ordinary, time-sliced executor
  uint64_t mps_memory_limit_bytes = 0;
  bool spatial() const { return mps_sm_percent != 0; }
  bool warm_pool() const { return gpus.empty() && !spatial(); }
  auto operator<=>(const ExecutorKind&) const = default;
};

// "GPUs 0,1" or "every GPU", and the MPS share if any: for logs and errors.
std::string DescribeKind(const ExecutorKind& kind);

struct ExecutorProcess {
  enum class State { kStarting, kIdle, kServing, kFailed };
  pid_t pid = 0;
  ExecutorKind kind;
  State state = State::kStarting;
  ControlLine control{-1};
  ExecutorReady ready;
  uint64_t session_id = 0;
  SessionInfo session;
  int quota_session_slot = -1;
  bool killed_by_admin = false;
  // Started by an earlier backend and adopted by this one (not its child: its end is seen on the control line).
  bool adopted = false;
  bool retired = false;       // stopped by the pool (a device set's spare, idle too long)
  bool ended_with_group = false;  // ended because another client of its MPS server faulted
  uint64_t mps_generation = 0;    // spatial kinds: the MPS daemon it is a client of (ExecutorPool::mps_generation_)
  int64_t end_at_ms = 0;          // nonzero: killed then (its group ended; until then it answers its client)
  CUresult fault = CUDA_SUCCESS;  // the fatal fault its session reported, if any
  int64_t started_ms = 0;
  int64_t idle_since_ms = 0;
  CUresult failure = CUDA_SUCCESS;
  std::string failure_reason;
};

class ExecutorPool {
 public:
  static constexpr int64_t kSpareIdleMs = 300'000;   // a tenant's spare executor is stopped after this long idle
  static constexpr int64_t kStartTimeoutMs = 60'000;  // an executor not ready by then is killed as failed

  explicit ExecutorPool(ExecutorSettings settings);
  ~ExecutorPool();
  // Executors started from now on map this swap space (memory turns).
  void SetSwapSpace(const std::string& path, uint64_t bytes) {
    settings_.swap_space = path;
    settings_.swap_space_bytes = bytes;
  }

  // Reads control lines, reaps exited executors and tops up the warm pool. Never blocks.
  void Poll();
  // An idle executor of `kind` for a new session, or nullptr if none is ready yet.
  ExecutorProcess* TakeIdle(const ExecutorKind& kind);
  // Keeps `wanted` executors of a kind other than the warm pool's ready or starting (the broker asks for one per
  // client waiting for the kind plus a spare for its next session). After a start of the kind fails, the next
  // waits a second. A spare idle for `kSpareIdleMs` is stopped. Spatial kinds start once the MPS server is ready.
  void Provide(const ExecutorKind& kind, size_t wanted);
  // Why spatial sharing cannot run on this host; empty when it can be tried.
  std::string SpatialSharingUnavailable() const { return mps_.Unavailable(); }
  // The host GPUs an executor shows its session, in its device order.
  DeviceSet HostGpusOf(const ExecutorProcess& executor) const;
  bool Assign(ExecutorProcess& executor, const SessionAssignment& assignment, SessionInfo session);
  // Called when a serving executor has exited (however it ended), before it is forgotten.
  void OnSessionEnd(std::function<void(const ExecutorProcess&)> callback) { on_session_end_ = std::move(callback); }
  // Takes over the serving executor `pid` of an earlier backend, whose adoption connection is `control_fd`.
  void Adopt(int control_fd, pid_t pid, const SessionRecord& record);
  // Ends a session at once (SIGKILL to its executor: the client's next call fails); false if no such session.
  bool Kill(uint64_t session_id);
  // Why executors could not start since the last call, by device set, for refusing the clients waiting for them.
  std::map<ExecutorKind, std::pair<CUresult, std::string>> TakeStartFailures();
  // How many GPUs the host has, as the first executor of every GPU reported; 0 until one has started.
  int host_gpus() const { return host_gpus_; }
  size_t serving() const;
  std::vector<const ExecutorProcess*> executors() const;
  // SIGTERM to every executor, then SIGKILL to any still alive after `grace_ms`. With `keep_sessions` (live
  // restore), serving executors are left running, their control lines closed, for the next backend to adopt.
  void Shutdown(int grace_ms, bool keep_sessions = false);

 private:
  bool Start(const ExecutorKind& kind);
  void Reap();
  void ReapAdopted();
  void ReadControlLines();
  // A client of the MPS server faulted: the fault reaches every client of that server, so all of them end (their
  // clients get CUDA_ERROR_DEVICE_UNAVAILABLE) and the server starts afresh. Executors outside it are untouched.
  void EndSpatialGroup(const ExecutorProcess& faulted);
  void FinishSpatialGroupEnd();
  // Records why `executor` could not start (for the clients waiting for its set) and paces the set's next start.
  void RecordStartFailure(ExecutorProcess& executor, CUresult result, const std::string& reason);
  std::vector<std::string> ExecutorEnvironment(const ExecutorKind& kind) const;

  ExecutorSettings settings_;
  std::vector<std::unique_ptr<ExecutorProcess>> executors_;
  uint64_t next_socket_ = 0;
  std::map<ExecutorKind, std::pair<CUresult, std::string>> start_failures_;
  std::map<ExecutorKind, int64_t> set_retry_after_ms_;
  MpsServer mps_;
  // The MPS daemon's generation, counted up when a fault ends its group: a fault reported afterwards by a client
  // of the old daemon (every client sees the fault) ends nothing more. While mps_restart_at_ms_ is set the
  // group's executors still answer their clients (their own error, not a vanished executor) and no spatial
  // executor starts; then the stragglers are killed and the daemon restarted.
  uint64_t mps_generation_ = 1;
  int64_t mps_restart_at_ms_ = 0;
  static constexpr int64_t kGroupEndGraceMs = 1000;
  // The backend's own CUDA_VISIBLE_DEVICES entries, when it has the variable.
  std::optional<std::vector<std::string>> visible_devices_;
  int host_gpus_ = 0;
  int consecutive_failures_ = 0;
  int64_t retry_after_ms_ = 0;
  bool shutting_down_ = false;
  std::function<void(const ExecutorProcess&)> on_session_end_;  // executors ended by Shutdown() are expected to die of SIGTERM
};

}  // namespace curelay::backend
