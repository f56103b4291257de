// The backend's NVIDIA MPS control daemon, for tenants that opt into spatial sharing (docs/scheduling.md). It runs
// in the foreground as the backend's child, with its pipe and log directories under the backend's runtime
// directory, so only executors given that pipe directory become its clients: every other executor (and any other
// process on the host) stays outside it and keeps its own fault isolation. A fault in one client reaches every
// client of the server, so the backend ends that group and restarts the daemon (Restart()).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace curelay::backend {

class MpsServer {
 public:
  // `control_binary`: nvidia-cuda-mps-control's path; empty: looked up in PATH and the driver's usual folders.
  MpsServer(std::string control_binary, std::string directory);
  ~MpsServer();
  MpsServer(const MpsServer&) = delete;
  MpsServer& operator=(const MpsServer&) = delete;

  // Why spatial sharing cannot run on this host (no control binary); empty when it can be tried.
  std::string Unavailable() const;
  // Starts the daemon if it is not running; never blocks. Reaps it and notices readiness in Poll().
  void Want();
  // True once the daemon's control pipe exists (clients started before that would run without MPS).
  bool ready() const { return pid_ > 0 && ready_; }
  // A failure to start (the daemon exited, or was not ready in time) since the last call; empty if none.
  std::string TakeFailure();
  // Reaps the daemon if it exited (`pid` is the child waitpid returned) and returns true if it was the daemon.
  bool Reaped(pid_t pid, int status);
  void Poll();
  // Kills the daemon and the servers it started (its process group) and starts it again.
  void Restart();
  void Stop();
  // The environment an executor needs to join this daemon's server, with its share of SMs and memory limit.
  std::vector<std::string> ClientEnvironment(uint32_t sm_percent, uint64_t memory_limit_bytes, int devices) const;
  uint64_t restarts() const { return restarts_; }

 private:
  std::string pipe_directory() const { return directory_ + "/pipe"; }
  std::string log_directory() const { return directory_ + "/log"; }

  std::string control_binary_;
  std::string directory_;
  pid_t pid_ = 0;
  bool ready_ = false;
  int64_t started_ms_ = 0;
  int64_t retry_after_ms_ = 0;
  std::string failure_;
  uint64_t restarts_ = 0;
};

}  // namespace curelay::backend
