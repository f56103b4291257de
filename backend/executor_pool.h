// The executor processes of one backend: starting them (a few ahead of demand, the warm pool), handing one to
// each admitted client, and reaping them when their session ends or they crash.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/executor_control.h"

namespace curelay::backend {

struct ExecutorSettings {
  std::string executor_path;           // the curelay-executor binary
  std::string driver_path;             // the real libcuda.so.1 the executors load
  std::string runtime_dir;             // where ipc session sockets live
  std::vector<std::string> tcp_hosts;  // hosts of tcp listen endpoints; executors bind a free port on each
  bool ipc = true;                     // whether executors bind an ipc endpoint
  std::string log_level = "info";
  size_t warm_pool = 1;
};

// Who a serving executor's session belongs to (for admission limits, backendctl and metrics).
struct SessionInfo {
  std::string tenant;          // empty: an anonymous session
  uint32_t client_pid = 0;
  std::string client_host;
  std::string client_program;
  int64_t started_unix = 0;
};

struct ExecutorProcess {
  enum class State { kStarting, kIdle, kServing, kFailed };
  pid_t pid = 0;
  State state = State::kStarting;
  ControlLine control{-1};
  ExecutorReady ready;
  uint64_t session_id = 0;
  SessionInfo session;
  int quota_session_slot = -1;
  bool killed_by_admin = false;
  CUresult failure = CUDA_SUCCESS;
  std::string failure_reason;
};

class ExecutorPool {
 public:
  explicit ExecutorPool(ExecutorSettings settings);
  ~ExecutorPool();

  // Reads control lines, reaps exited executors and tops up the warm pool. Never blocks.
  void Poll();
  // An idle executor for a new session, or nullptr if none is ready yet (Poll() starts more).
  ExecutorProcess* TakeIdle();
  bool Assign(ExecutorProcess& executor, const SessionAssignment& assignment, SessionInfo session);
  // Called when a serving executor has exited (however it ended), before it is forgotten.
  void OnSessionEnd(std::function<void(const ExecutorProcess&)> callback) { on_session_end_ = std::move(callback); }
  // Ends a session at once (SIGKILL to its executor: the client's next call fails); false if no such session.
  bool Kill(uint64_t session_id);
  // The failure of the most recent executor that could not start, for refusing clients with its reason.
  std::optional<std::pair<CUresult, std::string>> TakeStartFailure();
  size_t serving() const;
  std::vector<const ExecutorProcess*> executors() const;
  // SIGTERM to every executor, then SIGKILL to any still alive after `grace_ms`.
  void Shutdown(int grace_ms);

 private:
  bool Start();
  void Reap();

  ExecutorSettings settings_;
  std::vector<std::unique_ptr<ExecutorProcess>> executors_;
  uint64_t next_socket_ = 0;
  std::optional<std::pair<CUresult, std::string>> start_failure_;
  int consecutive_failures_ = 0;
  int64_t retry_after_ms_ = 0;
  bool shutting_down_ = false;
  std::function<void(const ExecutorProcess&)> on_session_end_;  // executors ended by Shutdown() are expected to die of SIGTERM
};

}  // namespace curelay::backend
