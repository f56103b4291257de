// A real curelay-backend process for integration tests, on the emulated driver, with its own socket and
// runtime directory. Its log is kept so tests can see which executor serves which session.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace curelay::testing {

class BackendProcess {
 public:
  // extra_env: variables for the backend (and so its executors), e.g. CURELAY_EMU_DEVICE_MEMORY.
  // kRdma: the backend listens on rdma://127.0.0.1 (its handshake on that tcp port, sessions over the emulated
  // verbs library, which must be first on LD_LIBRARY_PATH for the backend and the clients).
  enum class Transport { kIpc, kTcp, kRdma };
  explicit BackendProcess(const std::string& name, std::map<std::string, std::string> extra_env = {},
                          Transport transport = Transport::kIpc, std::string endpoint = {});
  ~BackendProcess();

  // Clients must then present a tenant token (by default the test backend admits anonymous clients).
  void RequireTokens() { allow_anonymous_ = false; }
  // More command-line arguments for the backend (before Start).
  void AddArguments(std::vector<std::string> arguments) {
    extra_args_.insert(extra_args_.end(), arguments.begin(), arguments.end());
  }
  // Sets a variable of the backend's environment for its next Start (a different host after a restart).
  void SetEnv(const std::string& key, const std::string& value) { extra_env_[key] = value; }
  // Starts the backend; after Stop() it starts again on the same runtime and state directories.
  bool Start();
  void Stop();
  // After the test reaped the process itself.
  void Forget() { pid_ = -1; }
  pid_t pid() const { return pid_; }
  const std::string& endpoint() const { return endpoint_; }
  std::string admin_endpoint() const { return "ipc://" + directory_ + "/private/admin.sock"; }
  const std::string& runtime_dir() const { return directory_; }
  std::string Log() const;
  // The pid of the executor the backend gave to its most recent session, waiting up to `timeout`.
  pid_t LatestSessionExecutor(std::chrono::milliseconds timeout) const;
  // The pid of the executor of session `session_id` (a Welcome's), waiting up to `timeout` for the backend to log it:
  // its answer may reach the client before that line, and an earlier session's line is then the latest.
  pid_t SessionExecutor(uint64_t session_id, std::chrono::milliseconds timeout) const;
  // The backend's live child processes (its executors, idle or serving).
  std::vector<pid_t> Children() const;
  bool Alive() const;

 private:
  // The executor pid of the latest "session N -> executor pid P" line in the log, or of session `session_id`'s when
  // given, waiting up to `timeout` for one to appear; -1 if none did.
  pid_t ExecutorFromLog(std::optional<uint64_t> session_id, std::chrono::milliseconds timeout) const;

  std::string name_;
  std::map<std::string, std::string> extra_env_;
  std::string directory_;
  Transport transport_;
  std::string endpoint_;       // where clients connect (for tcp, the port the backend bound)
  std::string bind_endpoint_;  // what the backend is told to listen on
  std::string log_path_;
  pid_t pid_ = -1;
  bool allow_anonymous_ = true;
  std::vector<std::string> extra_args_;
};

// The transport CURELAY_TEST_TRANSPORT names (tcp or rdma; otherwise ipc), for suites whose backends run on each.
inline BackendProcess::Transport TestTransport() {
  const char* variable = std::getenv("CURELAY_TEST_TRANSPORT");
  const std::string transport = variable != nullptr ? variable : "";
  return transport == "tcp"    ? BackendProcess::Transport::kTcp
         : transport == "rdma" ? BackendProcess::Transport::kRdma
                               : BackendProcess::Transport::kIpc;
}

bool ProcessExists(pid_t pid);
// Waits until `condition` holds, polling, for at most `timeout`.
template <typename Condition>
bool WaitFor(Condition condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    struct timespec pause = {0, 10'000'000};
    nanosleep(&pause, nullptr);
  }
  return condition();
}

struct ProcessResult {
  int exit_code = -1;  // -1: did not exit in time (killed) or crashed
  std::string output;
};
// Runs the test client with arguments and environment additions; kills it after `timeout`.
ProcessResult RunClient(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                        std::chrono::milliseconds timeout);
// Starts the test client without waiting; its stdout goes to `output_path` (and its stderr, the shim's and the
// transport's log lines, to `log_path` when one is given).
pid_t StartClient(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                  const std::string& output_path, const std::string& log_path = {});
// The same for another program (a probe built for one suite).
ProcessResult RunProgram(const std::string& program, const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& env, std::chrono::milliseconds timeout);

}  // namespace curelay::testing
