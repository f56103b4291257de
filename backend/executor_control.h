// The control line between curelay-backend and one executor: a Unix SOCK_SEQPACKET socketpair, one verified
// FlatBuffers message (schema/control.fbs) per datagram: ExecutorReady or ExecutorFailed and SessionFaulted from
// the executor, SessionAssignment from the backend. After a backend is gone, the same messages run over a
// connection to the new backend's adoption socket, opened by SessionAdoption and answered by AdoptionAnswer. It
// never carries client traffic.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

namespace curelay::backend {

// Bumped whenever control.fbs changes incompatibly; backend and executors are always built together, so a mismatch
// means a stale executor binary, refused with a clear error.
inline constexpr uint32_t kControlVersion = 4;

struct ExecutorReady {
  std::string ipc_endpoint;  // empty when the executor has none
  uint16_t tcp_port = 0;     // its ZeroMQ tcp port; 0 when it has none
  uint16_t rdma_port = 0;    // its rdma:// bootstrap port; 0 when it has none
  int devices = 0;           // the GPUs its driver shows it (all of the host's, or the tenant's it was started for)
};

// What a new backend needs to take over a serving executor whose backend is gone (schema/control.fbs).
struct SessionRecord {
  uint64_t session_id = 0;
  std::string tenant;  // empty: anonymous
  uint32_t client_pid = 0;
  std::string client_host;
  std::string client_program;
  int64_t started_unix = 0;
  std::vector<int> gpus;  // empty: every GPU
  uint32_t mps_sm_percent = 0;
  uint64_t mps_memory_limit_bytes = 0;
  int quota_session_slot = -1;
  ExecutorReady ready;
  uint64_t dispatch_board_layout = 0;  // the boards' layouts it maps (their magic numbers); 0: none, or unknown
  uint64_t quota_board_layout = 0;
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
  // Restarts (docs/operations.md): where a new backend adopts this executor once the line breaks, and for how long
  // the executor serves without a backend before ending its session.
  std::string adoption_socket;
  int64_t orphan_grace_ms = 300'000;
  SessionRecord record;
  std::string client_curve_key;  // CURVE: the only client key the executor lets in on tcp (docs/security.md)
};

struct AdoptionAnswer {
  bool accepted = false;
  std::string reason;
};

// One message as received, verified and decoded.
struct ControlRecord {
  enum class Kind { kReady, kFailed, kSession, kFaulted, kAdoption, kAdoptionAnswer, kMalformed };
  Kind kind = Kind::kMalformed;
  ExecutorReady ready;
  SessionAssignment session;
  SessionRecord adoption;  // kAdoption
  uint32_t executor_pid = 0;  // kAdoption
  AdoptionAnswer answer;      // kAdoptionAnswer
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
  bool SendAdoption(uint32_t executor_pid, const SessionRecord& record);
  bool SendAdoptionAnswer(const AdoptionAnswer& answer);
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
