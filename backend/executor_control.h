// The control line between curelay-backend and one executor: a Unix socketpair carrying newline-terminated text
// records, READY/FAILED from the executor and SESSION from the backend. It never carries client traffic.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

namespace curelay::backend {

struct ExecutorReady {
  std::string ipc_endpoint;  // empty when the executor has none
  uint16_t tcp_port = 0;     // 0 when the executor has none
  int devices = 0;           // the GPUs its driver shows it (all of the host's, or the tenant's it was started for)
};

struct SessionAssignment {
  uint64_t session_id = 0;
  std::vector<uint8_t> key;
  // The memory quota board and this session's account on it (docs/scheduling.md); none for anonymous sessions.
  std::string quota_board;
  int quota_session_slot = -1;
  // The scheduler's dispatch board; the session's slot on it is quota_session_slot (tenant sessions only).
  std::string dispatch_board;
};

std::string FormatReady(const std::string& ipc_endpoint, const std::string& tcp_endpoint, int devices);
std::string FormatFailed(CUresult result, const std::string& reason);
std::string FormatSession(const SessionAssignment& assignment);
bool ParseReady(const std::string& line, ExecutorReady* ready);
bool ParseFailed(const std::string& line, CUresult* result, std::string* reason);
bool ParseSession(const std::string& line, SessionAssignment* assignment);

// Blocking line I/O on the descriptor (the executor side; the backend reads non-blocking via Feed()).
class ControlLine {
 public:
  explicit ControlLine(int fd) : fd_(fd) {}
  bool Write(const std::string& line);
  bool Read(std::string* line);
  // Appends what is readable now without blocking; returns false on EOF or error.
  bool Feed();
  // Pops one complete line, if buffered.
  bool PopLine(std::string* line);
  int fd() const { return fd_; }

 private:
  int fd_;
  std::string buffer_;
};

}  // namespace curelay::backend
