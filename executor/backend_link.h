// The executor's line to its backend once its session runs: it reports fatal faults there, and it outlives the
// backend. When the line breaks (the backend crashed, was killed, or stopped with live restore), the session goes
// on, unscheduled, while the executor offers itself to a new backend on the adoption socket every 200 ms; once
// adopted it is scheduled and metered again. After the orphan grace with no backend, it ends its session: the
// process exits, which frees its GPU memory, and the client's next call fails as with any lost executor.
#pragma once

#include <cuda.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "backend/executor_control.h"
#include "executor/dispatch_gate.h"

namespace curelay::executor {

class BackendLink {
 public:
  BackendLink(backend::ControlLine line, backend::SessionAssignment assignment, DispatchGate& gate);
  ~BackendLink();
  // Starts watching the line (a thread of its own; the session's thread never waits for the backend).
  void Start();
  void SendFaulted(CUresult result);

 private:
  void Watch();
  // One attempt to be adopted by a backend listening on the adoption socket: a connected, accepted line, or -1.
  // Sets `refused` when a backend answered no (the session must end).
  int TryAdoption(bool* refused);
  [[noreturn]] void EndSession(const char* why);

  std::mutex mutex_;  // guards line_ (the session's thread reports faults on it)
  backend::ControlLine line_;
  const backend::SessionAssignment assignment_;
  DispatchGate& gate_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace curelay::executor
