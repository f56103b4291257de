// The control line between curelay-backend and one executor: a Unix SOCK_SEQPACKET socketpair, one verified
// FlatBuffers message (schema/control.fbs) per datagram: ExecutorReady or ExecutorFailed and SessionFaulted from
// the executor, SessionAssignment from the backend. It never carries client traffic.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

namespace curelay::backend {

// Bumped whenever control.fbs changes incompatibly; backend and executors are always built together, so a mismatch
// means a stale executor binary, refused with a clear error.
inline constexpr uint32_t kControlVersion = 3;

struct ExecutorReady {
  std::string ipc_endpoint;  // empty when the executor has none
  uint16_t tcp_port = 0;     // its ZeroMQ tcp port; 0 when it has none
  uint16_t rdma_port = 0;    // its rdma:// bootstrap port; 0 when it has none
  int devices = 0;           // the GPUs its driver shows it (all of the host's, or the tenant's it was started for)
};

struct SessionAssignment {
  uint64_t session_id = 0;
  std::vector<uint8_t> key;
  // The memory quota board and this session's account on it (docs/scheduling.md); none for anonymous sessions.
  std::string quota_board;
  int quota_session_slot = -1;
  // The scheduler's dispatch board; the session's slot on it is quota_session_slot (scheduled sessions only).
  std::string dispatch_board;
  // CUDA IPC: the registry directory (empty: off) and the scope of this session's handles (its tenant; empty for
  // anonymous sessions).
  std::string ipc_registry;
  std::string ipc_scope;
};

// One message as received, verified and decoded.
struct ControlRecord {
  enum class Kind { kReady, kFailed, kSession, kFaulted, kMalformed };
  Kind kind = Kind::kMalformed;
  ExecutorReady ready;
  SessionAssignment session;
  CUresult result = CUDA_SUCCESS;  // kFailed and kFaulted
  std::string reason;              // kFailed; for kMalformed, what was wrong
};

class ControlLine {
 public:
  explicit ControlLine(int fd) : fd_(fd) {}
  // Each returns false when the peer is gone.
  // Endpoints as the channel names them (empty: none of that kind); only the ports of tcp and rdma travel.
  bool SendReady(const std::string& ipc_endpoint, const std::string& tcp_endpoint, const std::string& rdma_endpoint,
                 int devices);
  bool SendFailed(CUresult result, const std::string& reason);
  bool SendSession(const SessionAssignment& assignment);
  bool SendFaulted(CUresult result);
  // Waits for the next message (the executor side). False on EOF or error.
  bool Receive(ControlRecord* record);
  // The next message if one is waiting, without blocking (the backend side, whose descriptor is non-blocking).
  enum class Poll { kMessage, kNone, kClosed };
  Poll TryReceive(ControlRecord* record);
  int fd() const { return fd_; }

 private:
  bool Send(const uint8_t* bytes, size_t size);

  int fd_;
};

}  // namespace curelay::backend
