#include "executor/backend_link.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace curelay::executor {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kWatchPollMs = 200;     // how often the watcher looks at the line and the stop flag
constexpr int kAnswerTimeoutMs = 5000;  // a backend that took the connection answers within this

// Whether `fd` has something to read (a message or EOF) within `timeout_ms`.
bool Readable(int fd, int timeout_ms) {
  pollfd entry{fd, POLLIN, 0};
  for (;;) {
    const int ready = poll(&entry, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    return ready > 0;
  }
}

}  // namespace

BackendLink::BackendLink(backend::ControlLine line, backend::SessionAssignment assignment, DispatchGate& gate)
    : line_(line), assignment_(std::move(assignment)), gate_(gate) {}

BackendLink::~BackendLink() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void BackendLink::Start() { thread_ = std::thread([this] { Watch(); }); }

void BackendLink::SendFaulted(CUresult result) {
  std::lock_guard lock(mutex_);
  if (line_.fd() >= 0) line_.SendFaulted(result);  // while orphaned the fault is only logged (by the session)
}

void BackendLink::Watch() {
  for (;;) {
    // Serving under a backend: wait for the line to break. The backend sends nothing after the assignment, so
    // anything readable is EOF (or a message from a confused peer, which breaks the line the same way).
    int fd;
    {
      std::lock_guard lock(mutex_);
      fd = line_.fd();
    }
    while (!Readable(fd, kWatchPollMs)) {
      if (stop_.load()) return;
    }
    backend::ControlRecord ignored;
    const backend::ControlLine::Poll polled = line_.TryReceive(&ignored);
    if (polled == backend::ControlLine::Poll::kMessage) {
      spdlog::warn("unexpected control message from the backend ({}); ignored", ignored.reason);
    }
    if (polled != backend::ControlLine::Poll::kClosed) continue;
    {
      std::lock_guard lock(mutex_);
      close(line_.fd());
      line_ = backend::ControlLine(-1);
    }
    if (assignment_.adoption_socket.empty()) {
      spdlog::warn("session {}: the backend is gone; serving on without one", assignment_.session_id);
      return;  // a backend that offers no adoption (tests of the executor alone)
    }
    gate_.SetUnscheduled(true);
    spdlog::warn("session {}: the backend is gone; serving unscheduled, waiting up to {} s for a new backend at {}",
                 assignment_.session_id, assignment_.orphan_grace_ms / 1000, assignment_.adoption_socket);
    const auto deadline = Clock::now() + std::chrono::milliseconds(assignment_.orphan_grace_ms);
    int adopted = -1;
    while (adopted < 0) {
      if (stop_.load()) return;
      if (Clock::now() >= deadline) EndSession("no backend adopted it within the orphan grace");
      bool refused = false;
      adopted = TryAdoption(&refused);
      if (refused) EndSession("the new backend refused to adopt it");
      if (adopted < 0) std::this_thread::sleep_for(std::chrono::milliseconds(kWatchPollMs));
    }
    {
      std::lock_guard lock(mutex_);
      line_ = backend::ControlLine(adopted);
    }
    gate_.SetUnscheduled(false);
    spdlog::info("session {}: adopted by a new backend; scheduled again", assignment_.session_id);
  }
}

int BackendLink::TryAdoption(bool* refused) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (assignment_.adoption_socket.size() >= sizeof(address.sun_path)) return -1;
  std::memcpy(address.sun_path, assignment_.adoption_socket.c_str(), assignment_.adoption_socket.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);  // no backend listening yet
    return -1;
  }
  backend::ControlLine line(fd);
  backend::ControlRecord answer;
  if (!line.SendAdoption(static_cast<uint32_t>(getpid()), assignment_.record) || !Readable(fd, kAnswerTimeoutMs) ||
      !line.Receive(&answer) || answer.kind != backend::ControlRecord::Kind::kAdoptionAnswer) {
    close(fd);
    return -1;
  }
  if (!answer.answer.accepted) {
    spdlog::error("session {}: the new backend refused to adopt it: {}", assignment_.session_id, answer.answer.reason);
    close(fd);
    *refused = true;
    return -1;
  }
  return fd;
}

void BackendLink::EndSession(const char* why) {
  spdlog::error("session {}: {}; ending the session", assignment_.session_id, why);
  // Nobody is left to remove the executor's socket file; the driver frees the GPU memory as the process exits.
  const std::string& ipc = assignment_.record.ready.ipc_endpoint;
  if (ipc.rfind("ipc://", 0) == 0) unlink(ipc.c_str() + 6);
  spdlog::shutdown();
  std::_Exit(3);
}

}  // namespace curelay::executor
