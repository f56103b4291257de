#include "executor/shareable_handles.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

namespace curelay::executor {
namespace {

// An exporter answers at once (one lookup); a peer that stalls longer is treated as gone.
constexpr int kAnswerSeconds = 2;

bool FillAddress(const std::string& path, sockaddr_un* address) {
  *address = {};
  if (path.size() >= sizeof(address->sun_path)) return false;
  address->sun_family = AF_UNIX;
  std::memcpy(address->sun_path, path.c_str(), path.size() + 1);
  return true;
}

void SetTimeouts(int fd) {
  const timeval timeout{kAnswerSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
}

bool ReceiveExactly(int fd, void* data, size_t size) {
  auto* bytes = static_cast<uint8_t*>(data);
  while (size > 0) {
    const ssize_t got = recv(fd, bytes, size, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    bytes += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

std::string ShareableHandleServer::SocketPath(const std::string& directory, pid_t pid) {
  return directory + "/descriptors-" + std::to_string(pid) + ".sock";
}

bool ShareableHandleServer::Add(int fd, uint64_t owner, uint64_t bytes, Token* token) {
  std::lock_guard lock(mutex_);
  if (const auto known = owners_.find(owner); known != owners_.end()) {
    close(fd);
    *token = known->second;
    return true;
  }
  if (!enabled() || !StartLocked()) {
    close(fd);
    return false;
  }
  Token fresh;
  if (getrandom(fresh.data(), fresh.size(), 0) != static_cast<ssize_t>(fresh.size())) {
    spdlog::warn("cannot draw a token for a shareable handle: {}", strerror(errno));
    close(fd);
    return false;
  }
  descriptors_[fresh] = {fd, bytes};
  owners_[owner] = fresh;
  *token = fresh;
  return true;
}

bool ShareableHandleServer::Find(uint64_t owner, Token* token) const {
  std::lock_guard lock(mutex_);
  const auto known = owners_.find(owner);
  if (known == owners_.end()) return false;
  *token = known->second;
  return true;
}

void ShareableHandleServer::Withdraw(uint64_t owner) {
  std::lock_guard lock(mutex_);
  const auto known = owners_.find(owner);
  if (known == owners_.end()) return;
  if (const auto served = descriptors_.find(known->second); served != descriptors_.end()) {
    close(served->second.fd);
    descriptors_.erase(served);
  }
  owners_.erase(known);
}

void ShareableHandleServer::WithdrawAll() {
  std::lock_guard lock(mutex_);
  for (const auto& [token, served] : descriptors_) close(served.fd);
  descriptors_.clear();
  owners_.clear();
}

bool ShareableHandleServer::StartLocked() {
  if (listener_ >= 0) return true;
  const std::string path = SocketPath(directory_, getpid());
  sockaddr_un address;
  if (!FillAddress(path, &address)) {
    spdlog::warn("cannot serve shareable handles: the socket path {} is too long", path);
    return false;
  }
  // Non-blocking: a connection that went away between poll and accept must not hold the serving thread.
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  unlink(path.c_str());  // left by an earlier process of the same id that was killed
  if (listener < 0 || bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      chmod(path.c_str(), 0600) != 0 || listen(listener, 16) != 0 || pipe2(stop_, O_CLOEXEC) != 0) {
    spdlog::warn("cannot serve shareable handles on {}: {}", path, strerror(errno));
    if (listener >= 0) close(listener);
    unlink(path.c_str());
    return false;
  }
  listener_ = listener;
  thread_ = std::thread([this, listener, stop = stop_[0]] { Serve(listener, stop); });
  return true;
}

void ShareableHandleServer::Serve(int listener, int stop) {
  for (;;) {
    pollfd waits[2] = {{listener, POLLIN, 0}, {stop, POLLIN, 0}};
    if (poll(waits, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::warn("shareable handles: poll failed: {}", strerror(errno));
      return;
    }
    if (waits[1].revents != 0) return;
    const int connection = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) {
      // Out of descriptors (or another lasting error): poll would report the listener ready at once, again.
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) usleep(10'000);
      continue;
    }
    SetTimeouts(connection);
    AnswerImporter(connection);
    close(connection);
  }
}

void ShareableHandleServer::AnswerImporter(int connection) {
  // Only this host's executors (the backend's user) reach the registry directory; the check keeps it so if the
  // directory's permissions were ever loosened.
  ucred peer{};
  socklen_t peer_size = sizeof peer;
  if (getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &peer, &peer_size) != 0 || peer.uid != geteuid()) {
    spdlog::warn("shareable handles: refused a connection from another user");
    return;
  }
  Token token;
  if (!ReceiveExactly(connection, token.data(), token.size())) return;
  int fd = -1;
  Answer answer{};
  {
    std::lock_guard lock(mutex_);
    // A duplicate, so a Withdraw meanwhile cannot close what is being sent.
    if (const auto served = descriptors_.find(token); served != descriptors_.end()) {
      fd = fcntl(served->second.fd, F_DUPFD_CLOEXEC, 0);
      answer.bytes = served->second.bytes;
    }
  }
  answer.found = fd >= 0 ? 1 : 0;
  iovec data{&answer, sizeof answer};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  }
  if (sendmsg(connection, &message, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof answer)) {
    spdlog::warn("shareable handles: cannot answer an importer: {}", strerror(errno));
  }
  if (fd >= 0) close(fd);
}

int ShareableHandleServer::Fetch(const std::string& directory, pid_t exporter, const Token& token,
                                 uint64_t* bytes) {
  sockaddr_un address;
  if (!FillAddress(SocketPath(directory, exporter), &address)) return -1;
  const int connection = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connection < 0) return -1;
  SetTimeouts(connection);
  int fd = -1;
  Answer answer{};
  iovec data{&answer, sizeof answer};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  ssize_t got = -1;
  if (connect(connection, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 &&
      send(connection, token.data(), token.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(token.size())) {
    do {
      got = recvmsg(connection, &message, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
  }
  const bool whole = got == static_cast<ssize_t>(sizeof answer) && (message.msg_flags & MSG_CTRUNC) == 0;
  if (got > 0) {
    for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
      if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(header) + i * sizeof(int), sizeof received);
        if (fd < 0 && whole && answer.found == 1) {
          fd = received;
        } else {
          close(received);  // more than the one descriptor asked for
        }
      }
    }
  }
  close(connection);
  if (fd < 0) {
    spdlog::info("the executor {} serves no shareable handle under this token ({})", exporter,
                 whole ? "unknown token" : "no answer");
  }
  *bytes = answer.bytes;
  return fd;
}

ShareableHandleServer::~ShareableHandleServer() {
  WithdrawAll();
  if (thread_.joinable()) {
    const uint8_t wake = 1;
    if (write(stop_[1], &wake, 1) != 1) spdlog::warn("shareable handles: cannot stop the serving thread");
    thread_.join();
  }
  if (listener_ >= 0) {
    close(listener_);
    unlink(SocketPath(directory_, getpid()).c_str());
  }
  for (int& end : stop_) {
    if (end >= 0) close(end);
  }
}

}  // namespace curelay::executor
