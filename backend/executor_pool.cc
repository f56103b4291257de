#include "backend/executor_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "common/gpu_list.h"

namespace curelay::backend {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string DescribeKind(const ExecutorKind& kind) {
  std::string text = kind.gpus.empty() ? "every GPU" : "GPUs " + FormatGpuList(kind.gpus);
  if (kind.spatial()) text += ", MPS " + std::to_string(kind.mps_sm_percent) + "% of SMs";
  return text;
}

ExecutorPool::ExecutorPool(ExecutorSettings settings)
    : settings_(std::move(settings)), mps_(settings_.mps_control, settings_.private_dir() + "/mps") {
  // Device sets are in the backend's numbering, so an executor's CUDA_VISIBLE_DEVICES names the entries of the
  // backend's own list when it has one (a backend given GPUs 2,3 gives a tenant of GPU 1 the host's GPU 3).
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    visible_devices_.emplace();
    for (std::string_view rest = visible; !rest.empty();) {
      const size_t comma = rest.find(',');
      visible_devices_->emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
}

std::vector<std::string> ExecutorPool::ExecutorEnvironment(const ExecutorKind& kind) const {
  const DeviceSet& gpus = kind.gpus;
  std::vector<std::string> environment;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (kind.spatial() && std::strncmp(*variable, "CUDA_MPS_", 9) == 0) continue;  // ours replace them
    if (gpus.empty() || std::strncmp(*variable, "CUDA_VISIBLE_DEVICES=", 21) != 0) environment.push_back(*variable);
  }
  if (kind.spatial()) {
    const int devices = gpus.empty() ? host_gpus_ : static_cast<int>(gpus.size());
    for (std::string& variable : mps_.ClientEnvironment(kind.mps_sm_percent, kind.mps_memory_limit_bytes, devices)) {
      environment.push_back(std::move(variable));
    }
  }
  if (gpus.empty()) return environment;
  std::string visible = "CUDA_VISIBLE_DEVICES=";
  for (size_t i = 0; i < gpus.size(); ++i) {
    const size_t gpu = static_cast<size_t>(gpus[i]);
    // "-1" names no GPU: the driver then shows none from there on, and the executor refuses to start.
    const std::string entry = !visible_devices_ ? std::to_string(gpu)
                              : gpu < visible_devices_->size() ? (*visible_devices_)[gpu]
                                                              : std::string("-1");
    visible += (i == 0 ? "" : ",") + entry;
  }
  environment.push_back(visible);
  return environment;
}

ExecutorPool::~ExecutorPool() { Shutdown(2000); }

bool ExecutorPool::Start(const ExecutorKind& kind) {
  const DeviceSet& gpus = kind.gpus;
  int fds[2];
  // Datagrams: each control message (schema/control.fbs) arrives whole or not at all.
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    spdlog::error("socketpair: {}", strerror(errno));
    return false;
  }
  const uint64_t index = next_socket_++;
  std::vector<std::string> args = {settings_.executor_path, "--driver", settings_.driver_path,
                                   "--control-fd", "3", "--log-level", settings_.log_level};
  if (settings_.ipc) {
    args.insert(args.end(), {"--bind", "ipc://" + settings_.runtime_dir + "/executor-" +
                                           std::to_string(getpid()) + "-" + std::to_string(index) + ".sock"});
  }
  for (const auto& host : settings_.tcp_hosts) {
    args.insert(args.end(), {"--bind", "tcp://" + host + ":" + settings_.tcp_ports});
  }
  if (!settings_.rdma_host.empty()) {
    args.insert(args.end(), {"--bind", "rdma://" + settings_.rdma_host + ":" + settings_.tcp_ports});
  }
  args.insert(args.end(), {"--heartbeat-timeout-ms", std::to_string(settings_.heartbeat_timeout_ms)});
  if (!settings_.nvml_path.empty()) args.insert(args.end(), {"--nvml", settings_.nvml_path});
  if (!gpus.empty()) args.insert(args.end(), {"--host-gpus", FormatGpuList(gpus)});
  if (kind.spatial()) args.insert(args.end(), {"--mps-client", "1"});
  if (!settings_.curve_secret_file.empty() && !settings_.tcp_hosts.empty()) {
    args.insert(args.end(), {"--curve-secret-file", settings_.curve_secret_file});
  }
  if (!settings_.swap_space.empty() && !kind.spatial()) {
    args.insert(args.end(), {"--swap-space", settings_.swap_space, "--swap-space-bytes",
                             std::to_string(settings_.swap_space_bytes)});
  }
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // Built before fork: the backend has threads, so the child may only call async-signal-safe functions.
  std::vector<std::string> environment = ExecutorEnvironment(kind);
  std::vector<char*> envp;
  for (auto& variable : environment) envp.push_back(variable.data());
  envp.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    spdlog::error("fork: {}", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  if (pid == 0) {
    // The child keeps only its end of the control line, as descriptor 3 (dup2 onto itself would keep close-on-exec).
    if (fds[1] == 3) fcntl(3, F_SETFD, 0);
    else dup2(fds[1], 3);
    setpgid(0, 0);  // a terminal's Ctrl-C goes to the backend, which then shuts executors down in order
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  auto executor = std::make_unique<ExecutorProcess>();
  executor->pid = pid;
  executor->kind = kind;
  executor->started_ms = NowMs();
  executor->control = ControlLine(fds[0]);
  if (kind.spatial()) executor->mps_generation = mps_generation_;
  spdlog::debug("started executor pid {} ({})", pid, DescribeKind(kind));
  executors_.push_back(std::move(executor));
  return true;
}

void ExecutorPool::ReadControlLines() {
  for (auto& executor : executors_) {
    if (executor->control.fd() < 0) continue;
    ControlRecord record;
    ControlLine::Poll polled;
    while ((polled = executor->control.TryReceive(&record)) == ControlLine::Poll::kMessage) {
      using Kind = ControlRecord::Kind;
      if (executor->state == ExecutorProcess::State::kStarting && record.kind == Kind::kReady) {
        executor->ready = record.ready;
        executor->state = ExecutorProcess::State::kIdle;
        executor->idle_since_ms = NowMs();
        if (executor->kind.warm_pool()) {
          consecutive_failures_ = 0;
          host_gpus_ = executor->ready.devices;
        }
        spdlog::debug("executor pid {} ready ({}, tcp port {}, rdma port {})", executor->pid,
                      executor->ready.ipc_endpoint, executor->ready.tcp_port, executor->ready.rdma_port);
      } else if (record.kind == Kind::kFailed) {
        executor->failure = record.result;
        executor->failure_reason = record.reason;
        RecordStartFailure(*executor, record.result, record.reason);
      } else if (executor->state == ExecutorProcess::State::kServing && record.kind == Kind::kFaulted &&
                 executor->fault == CUDA_SUCCESS) {
        executor->fault = record.result;
        spdlog::warn("session {} (executor pid {}, tenant '{}') took a fatal GPU fault ({})", executor->session_id,
                     executor->pid, executor->session.tenant, static_cast<int>(record.result));
        if (executor->kind.spatial()) EndSpatialGroup(*executor);
      } else if (executor->state == ExecutorProcess::State::kStarting) {
        RecordStartFailure(*executor, CUDA_ERROR_OPERATING_SYSTEM,
                           "unexpected control message during start: " + record.reason);
        kill(executor->pid, SIGKILL);
      } else {
        spdlog::warn("executor pid {}: unexpected control message {}", executor->pid, record.reason);
      }
    }
    if (polled == ControlLine::Poll::kClosed) {
      close(executor->control.fd());
      executor->control = ControlLine(-1);
    }
  }
}

void ExecutorPool::EndSpatialGroup(const ExecutorProcess& faulted) {
  if (faulted.mps_generation != mps_generation_) return;  // its group has already ended
  size_t ended = 0;
  for (auto& executor : executors_) {
    if (!executor->kind.spatial() || executor->retired || executor->mps_generation != mps_generation_) continue;
    executor->ended_with_group = executor.get() != &faulted;
    ++ended;
    if (executor->state != ExecutorProcess::State::kServing) {
      executor->retired = true;  // spares: simply gone
      kill(executor->pid, SIGKILL);
    } else {
      executor->end_at_ms = NowMs() + kGroupEndGraceMs;
    }
  }
  spdlog::warn("session {}'s fault reaches every client of the MPS server: ending {} executor(s) sharing it; "
               "restarting the MPS control daemon",
               faulted.session_id, ended);
  ++mps_generation_;
  mps_restart_at_ms_ = NowMs() + kGroupEndGraceMs;
}

void ExecutorPool::FinishSpatialGroupEnd() {
  for (auto& executor : executors_) {
    if (executor->end_at_ms != 0) kill(executor->pid, SIGKILL);
  }
  mps_restart_at_ms_ = 0;
  mps_.Restart();
}

void ExecutorPool::Poll() {
  mps_.Poll();
  ReadControlLines();
  if (mps_restart_at_ms_ != 0 && NowMs() >= mps_restart_at_ms_) FinishSpatialGroupEnd();
  Reap();
  for (auto& executor : executors_) {
    if (executor->state == ExecutorProcess::State::kStarting && NowMs() - executor->started_ms > kStartTimeoutMs) {
      RecordStartFailure(*executor, CUDA_ERROR_NO_DEVICE,
                         "executor not ready within " + std::to_string(kStartTimeoutMs / 1000) + " s");
      kill(executor->pid, SIGKILL);
    }
    if (executor->state != ExecutorProcess::State::kIdle || executor->kind.warm_pool() || executor->retired) {
      continue;
    }
    if (NowMs() - executor->idle_since_ms < kSpareIdleMs) continue;
    spdlog::info("executor pid {} for {} idle for {} s; stopping it", executor->pid, DescribeKind(executor->kind),
                 kSpareIdleMs / 1000);
    executor->retired = true;
    kill(executor->pid, SIGTERM);
  }
  // Top up the warm pool; after repeated start failures, back off instead of fork-looping.
  const auto warm = std::count_if(executors_.begin(), executors_.end(), [](const auto& e) {
    return e->kind.warm_pool() &&
           (e->state == ExecutorProcess::State::kStarting || e->state == ExecutorProcess::State::kIdle);
  });
  if (static_cast<size_t>(warm) < std::max<size_t>(settings_.warm_pool, 1) && NowMs() >= retry_after_ms_) {
    if (!Start({})) retry_after_ms_ = NowMs() + 1000;
  }
}

void ExecutorPool::Adopt(int control_fd, pid_t pid, const SessionRecord& record) {
  fcntl(control_fd, F_SETFL, O_NONBLOCK);
  auto executor = std::make_unique<ExecutorProcess>();
  executor->pid = pid;
  executor->adopted = true;
  executor->kind = {record.gpus, record.mps_sm_percent, record.mps_memory_limit_bytes};
  executor->state = ExecutorProcess::State::kServing;
  executor->control = ControlLine(control_fd);
  executor->ready = record.ready;
  executor->session_id = record.session_id;
  executor->session = {record.tenant, record.client_pid, record.client_host, record.client_program,
                       record.started_unix};
  executor->quota_session_slot = record.quota_session_slot;
  executor->started_ms = NowMs();
  if (host_gpus_ == 0 && executor->kind.warm_pool()) host_gpus_ = record.ready.devices;
  executors_.push_back(std::move(executor));
}

void ExecutorPool::ReapAdopted() {
  // Not this process's children: an adopted executor has ended when its control line closed (its descriptors close
  // as it exits) or its pid is gone.
  for (auto it = executors_.begin(); it != executors_.end();) {
    ExecutorProcess& executor = **it;
    if (!executor.adopted || (executor.control.fd() >= 0 && kill(executor.pid, 0) == 0)) {
      ++it;
      continue;
    }
    if (executor.killed_by_admin) {
      spdlog::info("executor pid {} (session {}, adopted) ended by an administrator", executor.pid,
                   executor.session_id);
    } else {
      spdlog::info("executor pid {} (session {}, adopted) ended", executor.pid, executor.session_id);
    }
    if (on_session_end_) on_session_end_(executor);
    if (executor.control.fd() >= 0) close(executor.control.fd());
    if (!executor.ready.ipc_endpoint.empty()) unlink(executor.ready.ipc_endpoint.substr(6).c_str());
    it = executors_.erase(it);
  }
}

void ExecutorPool::Reap() {
  ReapAdopted();
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    auto found = std::find_if(executors_.begin(), executors_.end(),
                              [&](const auto& e) { return e->pid == pid && !e->adopted; });
    if (found == executors_.end()) {
      mps_.Reaped(pid, status);
      continue;
    }
    ExecutorProcess& executor = **found;
    if (executor.ended_with_group) {
      spdlog::warn("executor pid {} (session {}, tenant '{}') ended: another client of its MPS server faulted", pid,
                   executor.session_id, executor.session.tenant);
    } else if (executor.end_at_ms != 0) {
      spdlog::warn("executor pid {} (session {}, tenant '{}') ended: its session's fault ended its MPS group", pid,
                   executor.session_id, executor.session.tenant);
    } else if (executor.retired) {
      spdlog::debug("executor pid {} retired", pid);
    } else if (WIFSIGNALED(status) && shutting_down_ && WTERMSIG(status) == SIGTERM) {
      spdlog::info("executor pid {} (session {}) stopped", pid, executor.session_id);
    } else if (executor.killed_by_admin) {
      spdlog::info("executor pid {} (session {}) ended by an administrator", pid, executor.session_id);
    } else if (WIFSIGNALED(status)) {
      spdlog::error("executor pid {} (session {}) killed by signal {}", pid, executor.session_id,
                    WTERMSIG(status));
    } else if (executor.state == ExecutorProcess::State::kServing) {
      spdlog::info("executor pid {} (session {}) exited with status {}", pid, executor.session_id,
                   WEXITSTATUS(status));
    } else if (executor.state != ExecutorProcess::State::kFailed) {
      spdlog::error("executor pid {} exited with status {} before serving a session", pid, WEXITSTATUS(status));
      RecordStartFailure(executor, CUDA_ERROR_NO_DEVICE, "executor exited during start");
    }
    if (executor.state != ExecutorProcess::State::kServing && executor.kind.warm_pool() && !executor.retired) {
      if (++consecutive_failures_ >= 3) retry_after_ms_ = NowMs() + 1000 * std::min(consecutive_failures_, 30);
    }
    if (executor.state == ExecutorProcess::State::kServing && on_session_end_) on_session_end_(executor);
    if (executor.control.fd() >= 0) close(executor.control.fd());
    if (!executor.ready.ipc_endpoint.empty()) unlink(executor.ready.ipc_endpoint.substr(6).c_str());
    executors_.erase(found);
  }
}

void ExecutorPool::RecordStartFailure(ExecutorProcess& executor, CUresult result, const std::string& reason) {
  spdlog::error("executor pid {} ({}) could not start: {}", executor.pid, DescribeKind(executor.kind), reason);
  executor.state = ExecutorProcess::State::kFailed;
  start_failures_[executor.kind] = {result, reason};
  if (!executor.kind.warm_pool()) set_retry_after_ms_[executor.kind] = NowMs() + 1000;
}

ExecutorProcess* ExecutorPool::TakeIdle(const ExecutorKind& kind) {
  for (auto& executor : executors_) {
    if (executor->kind == kind && !executor->retired && executor->state == ExecutorProcess::State::kIdle) {
      return executor.get();
    }
  }
  return nullptr;
}

void ExecutorPool::Provide(const ExecutorKind& kind, size_t wanted) {
  if (kind.warm_pool() || shutting_down_) return;
  if (const auto retry = set_retry_after_ms_.find(kind); retry != set_retry_after_ms_.end()) {
    if (NowMs() < retry->second) return;
    set_retry_after_ms_.erase(retry);
  }
  if (kind.spatial()) {
    // An executor started before the daemon accepts clients would run without MPS (and refuse to start).
    mps_.Want();
    if (std::string failure = mps_.TakeFailure(); !failure.empty()) {
      start_failures_[kind] = {CUDA_ERROR_NOT_SUPPORTED, "spatial sharing: " + failure};
      set_retry_after_ms_[kind] = NowMs() + 1000;
      return;
    }
    if (!mps_.ready() || mps_restart_at_ms_ != 0) return;
  }
  size_t ready_or_starting = 0;
  for (const auto& executor : executors_) {
    ready_or_starting += executor->kind == kind && !executor->retired &&
                         (executor->state == ExecutorProcess::State::kIdle ||
                          executor->state == ExecutorProcess::State::kStarting);
  }
  while (ready_or_starting++ < wanted) {
    if (!Start(kind)) return;
  }
}

DeviceSet ExecutorPool::HostGpusOf(const ExecutorProcess& executor) const {
  if (!executor.kind.gpus.empty()) return executor.kind.gpus;
  DeviceSet every;
  for (int gpu = 0; gpu < executor.ready.devices; ++gpu) every.push_back(gpu);
  return every;
}

bool ExecutorPool::Assign(ExecutorProcess& executor, const SessionAssignment& assignment, SessionInfo session) {
  if (!executor.control.SendSession(assignment)) return false;
  executor.state = ExecutorProcess::State::kServing;
  executor.session_id = assignment.session_id;
  executor.session = std::move(session);
  executor.quota_session_slot = assignment.quota_session_slot;
  return true;
}

bool ExecutorPool::Kill(uint64_t session_id) {
  for (auto& executor : executors_) {
    if (executor->state != ExecutorProcess::State::kServing || executor->session_id != session_id) continue;
    executor->killed_by_admin = true;
    kill(executor->pid, SIGKILL);
    return true;
  }
  return false;
}

std::map<ExecutorKind, std::pair<CUresult, std::string>> ExecutorPool::TakeStartFailures() {
  return std::exchange(start_failures_, {});
}

size_t ExecutorPool::serving() const {
  return std::count_if(executors_.begin(), executors_.end(),
                       [](const auto& e) { return e->state == ExecutorProcess::State::kServing; });
}

std::vector<const ExecutorProcess*> ExecutorPool::executors() const {
  std::vector<const ExecutorProcess*> list;
  for (const auto& executor : executors_) list.push_back(executor.get());
  return list;
}

void ExecutorPool::Shutdown(int grace_ms, bool keep_sessions) {
  shutting_down_ = true;
  if (keep_sessions) {
    for (auto it = executors_.begin(); it != executors_.end();) {
      ExecutorProcess& executor = **it;
      if (executor.state != ExecutorProcess::State::kServing) {
        ++it;
        continue;
      }
      spdlog::info("leaving session {} (executor pid {}) running for the next backend", executor.session_id,
                   executor.pid);
      if (executor.control.fd() >= 0) close(executor.control.fd());  // the executor now looks for a new backend
      it = executors_.erase(it);  // an exited child is reaped by init once this process is gone
    }
  }
  for (auto& executor : executors_) kill(executor->pid, SIGTERM);
  const int64_t deadline = NowMs() + grace_ms;
  while (!executors_.empty() && NowMs() < deadline) {
    Reap();
    if (!executors_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& executor : executors_) {
    spdlog::warn("executor pid {} ignored SIGTERM; killing it", executor->pid);
    kill(executor->pid, SIGKILL);
  }
  while (!executors_.empty()) {
    Reap();
    if (!executors_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  mps_.Stop();  // after its clients: the daemon's servers end with them
}

}  // namespace curelay::backend
