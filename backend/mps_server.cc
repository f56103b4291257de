#include "backend/mps_server.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

namespace curelay::backend {
namespace {

constexpr const char* kControlName = "nvidia-cuda-mps-control";
// Where the daemon usually is when it is not on PATH (driver containers put it under /usr/local/nvidia).
constexpr const char* kUsualFolders[] = {"/usr/local/nvidia/bin", "/usr/bin", "/usr/local/bin"};
constexpr int64_t kReadyTimeoutMs = 15'000;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool Executable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

std::string FindControlBinary() {
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (std::string_view rest = path; !rest.empty();) {
      const size_t colon = rest.find(':');
      const std::string candidate = std::string(rest.substr(0, colon)) + "/" + kControlName;
      if (Executable(candidate)) return candidate;
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  for (const char* folder : kUsualFolders) {
    const std::string candidate = std::string(folder) + "/" + kControlName;
    if (Executable(candidate)) return candidate;
  }
  return {};
}

}  // namespace

MpsServer::MpsServer(std::string control_binary, std::string directory)
    : control_binary_(control_binary.empty() ? FindControlBinary() : std::move(control_binary)),
      directory_(std::move(directory)) {}

MpsServer::~MpsServer() { Stop(); }

std::string MpsServer::Unavailable() const {
  if (control_binary_.empty()) {
    return std::string(kControlName) + " (NVIDIA MPS) was not found on PATH or in /usr/local/nvidia/bin, /usr/bin; "
           "set [mps] control in the backend's configuration";
  }
  if (!Executable(control_binary_)) return control_binary_ + " is not an executable file";
  return {};
}

void MpsServer::Want() {
  if (pid_ > 0 || NowMs() < retry_after_ms_) return;
  if (const std::string unavailable = Unavailable(); !unavailable.empty()) {
    failure_ = unavailable;
    retry_after_ms_ = NowMs() + 1000;
    return;
  }
  std::error_code ignored;
  std::filesystem::remove_all(pipe_directory(), ignored);  // a stale pipe from an earlier daemon must not count
  std::filesystem::create_directories(pipe_directory(), ignored);
  std::filesystem::create_directories(log_directory(), ignored);
  chmod(directory_.c_str(), 0700);
  // Built before fork: the backend has threads, so the child may only call async-signal-safe functions.
  std::vector<std::string> environment;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    if (std::strncmp(*variable, "CUDA_MPS_", 9) != 0) environment.push_back(*variable);
  }
  environment.push_back("CUDA_MPS_PIPE_DIRECTORY=" + pipe_directory());
  environment.push_back("CUDA_MPS_LOG_DIRECTORY=" + log_directory());
  std::vector<char*> envp;
  for (auto& variable : environment) envp.push_back(variable.data());
  envp.push_back(nullptr);
  std::string binary = control_binary_, foreground = "-f";
  char* argv[] = {binary.data(), foreground.data(), nullptr};
  const pid_t pid = fork();
  if (pid < 0) {
    failure_ = std::string("fork: ") + strerror(errno);
    retry_after_ms_ = NowMs() + 1000;
    return;
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own group: Restart() ends the daemon and the servers it forked together
    execve(argv[0], argv, envp.data());
    _exit(127);
  }
  setpgid(pid, pid);
  pid_ = pid;
  ready_ = false;
  started_ms_ = NowMs();
  spdlog::info("MPS control daemon started (pid {}, pipe directory {})", pid, pipe_directory());
}

void MpsServer::Poll() {
  if (pid_ <= 0 || ready_) return;
  // The daemon creates its control pipe once it accepts clients.
  if (access((pipe_directory() + "/control").c_str(), F_OK) == 0) {
    ready_ = true;
    spdlog::info("MPS control daemon ready ({} ms)", NowMs() - started_ms_);
    return;
  }
  if (NowMs() - started_ms_ > kReadyTimeoutMs) {
    failure_ = "the MPS control daemon did not create its control pipe within " +
               std::to_string(kReadyTimeoutMs / 1000) + " s (its log: " + log_directory() + "/control.log)";
    spdlog::error("{}", failure_);
    kill(-pid_, SIGKILL);
    retry_after_ms_ = NowMs() + 5000;
  }
}

bool MpsServer::Reaped(pid_t pid, int status) {
  if (pid != pid_ || pid <= 0) return false;
  pid_ = 0;
  if (!ready_ && failure_.empty()) {
    failure_ = "the MPS control daemon exited during start (" +
               (WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                                  : "signal " + std::to_string(WTERMSIG(status))) +
               "; its log: " + log_directory() + "/control.log)";
    spdlog::error("{}", failure_);
    retry_after_ms_ = NowMs() + 5000;
  } else if (ready_) {
    spdlog::warn("MPS control daemon exited; it starts again for the next spatially shared session");
  }
  ready_ = false;
  kill(-pid, SIGKILL);  // servers it forked, if any outlived it
  return true;
}

std::string MpsServer::TakeFailure() { return std::exchange(failure_, {}); }

void MpsServer::Restart() {
  Stop();
  ++restarts_;
  retry_after_ms_ = 0;
  Want();
}

void MpsServer::Stop() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  // Reaped here, not by the pool: the next daemon must not start while the old one's pipe may still answer.
  for (int i = 0; i < 500 && waitpid(pid_, nullptr, 0) < 0 && errno == EINTR; ++i) {
  }
  spdlog::info("MPS control daemon (pid {}) stopped", pid_);
  pid_ = 0;
  ready_ = false;
}

std::vector<std::string> MpsServer::ClientEnvironment(uint32_t sm_percent, uint64_t memory_limit_bytes,
                                                      int devices) const {
  std::vector<std::string> environment = {"CUDA_MPS_PIPE_DIRECTORY=" + pipe_directory(),
                                          "CUDA_MPS_LOG_DIRECTORY=" + log_directory(),
                                          "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + std::to_string(sm_percent)};
  if (memory_limit_bytes != 0) {
    // Per device ordinal as the client sees its devices; whole MiB, rounded down but at least 1.
    std::string limits = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=";
    const uint64_t mib = std::max<uint64_t>(memory_limit_bytes >> 20, 1);
    for (int device = 0; device < std::max(devices, 1); ++device) {
      limits += (device == 0 ? "" : ",") + std::to_string(device) + "=" + std::to_string(mib) + "M";
    }
    environment.push_back(limits);
  }
  return environment;
}

}  // namespace curelay::backend
