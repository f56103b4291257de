// The backend-executor control line (backend/executor_control.cc, schema/control.fbs): each datagram the peer
// sends on the SOCK_SEQPACKET socketpair is decoded by ControlLine::Receive (the executor's side) and
// ControlLine::TryReceive (the backend's side). The fuzz input is a sequence of records (fuzz_input.h), each one
// datagram, sent on a real socketpair and received through both calls as the product does.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "backend/executor_control.h"
#include "common/gpu_list.h"
#include "fuzz/fuzz_input.h"

namespace {

using curelay::backend::ControlLine;
using curelay::backend::ControlRecord;

// What every decoded record must satisfy, whatever the bytes were.
void CheckRecord(const ControlRecord& record) {
  bool valid = true;
  switch (record.kind) {
    case ControlRecord::Kind::kReady:
      valid = record.ready.devices >= 1;
      break;
    case ControlRecord::Kind::kSession:
      valid = record.session.quota_session_slot >= -1;
      break;
    case ControlRecord::Kind::kAdoption:
      valid = record.adoption.quota_session_slot >= -1 && record.adoption.ready.devices >= 0 &&
              record.adoption.gpus.size() <= static_cast<size_t>(curelay::kMaxHostGpus);
      break;
    case ControlRecord::Kind::kMalformed:
      valid = !record.reason.empty();
      break;
    default:
      break;
  }
  if (!valid) {
    std::fprintf(stderr, "control_line_fuzzer: a decoded record breaks its own invariants\n");
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int executor_side[2];
  int backend_side[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, executor_side) != 0 ||
      socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, backend_side) != 0) {
    std::perror("socketpair");
    std::abort();
  }
  ControlLine executor(executor_side[0]);
  ControlLine backend(backend_side[0]);
  curelay::fuzz::RecordReader input(data, size);
  while (!input.done()) {
    const auto datagram = input.Next();
    if (datagram.empty()) continue;  // a zero-length datagram reads as end of file, as the product treats it
    // The executor receives what the backend sent, and the other way round.
    const bool sent = send(executor_side[1], datagram.data(), datagram.size(), MSG_NOSIGNAL) ==
                          static_cast<ssize_t>(datagram.size()) &&
                      send(backend_side[1], datagram.data(), datagram.size(), MSG_NOSIGNAL) ==
                          static_cast<ssize_t>(datagram.size());
    if (!sent) continue;  // larger than the socket takes: never delivered, never decoded
    ControlRecord record;
    if (executor.Receive(&record)) CheckRecord(record);
    ControlRecord polled;
    if (backend.TryReceive(&polled) == ControlLine::Poll::kMessage) CheckRecord(polled);
  }
  for (int fd : {executor_side[0], executor_side[1], backend_side[0], backend_side[1]}) close(fd);
  return 0;
}
