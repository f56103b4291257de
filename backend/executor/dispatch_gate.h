// Holds a tenant session's kernel launches to the scheduler's grant (backend/dispatch/dispatch_board.h) and reports
// each launch and the GPU time it took, measured with a pair of driver events around it. The grant is read from
// shared memory before every launch; the executor waits (polling every 20 us) only while the grant says no, or
// while its in-flight work would exceed the budget a higher class imposes. Sessions without a slot (anonymous)
// are not scheduled and pay nothing.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "backend/dispatch/dispatch_board.h"
#include "backend/executor/driver.h"
#include "scheduler/kernel_cost_model.h"

namespace curelay::executor {

class DispatchGate {
 public:
  explicit DispatchGate(Driver& driver) : driver_(driver) {}
  ~DispatchGate();

  bool Attach(const std::string& board_path, int slot, std::string* error);
  bool active() const { return slot_ != nullptr; }

  // Waits until a launch of `kernel` may start.
  void AwaitGrant(uint64_t kernel);
  // A launch's start marker and the context it belongs to (start is null when the launch cannot be timed).
  struct Timing {
    CUcontext context = nullptr;
    CUevent start = nullptr;
  };
  // Records the start marker of a launch on `stream`.
  Timing BeginLaunch(CUstream stream);
  // After the launch: if it succeeded, records its end marker and reports it dispatched; otherwise gives the start
  // marker back.
  void EndLaunch(uint64_t kernel, CUstream stream, const Timing& timing, bool launched);
  // Reports launches whose end marker has completed, with their GPU time.
  void Poll();
  bool HasInflight() const { return !inflight_.empty(); }
  // Drops everything in flight (session teardown).
  void Release();
  // `context` is being destroyed or reset, and with it the markers made in it: forget them (their work is reported
  // done at its estimate) so none is used or destroyed afterwards.
  void ForgetContext(CUcontext context);

 private:
  struct Inflight {
    uint64_t kernel;
    int64_t estimate_ns;
    CUcontext context;  // events belong to the context current when they were made
    CUevent start;
    CUevent end;
  };
  struct SpareEvent {
    CUcontext context;
    CUevent event;
  };
  CUcontext CurrentContext() const;
  CUevent TakeEvent(CUcontext context);
  void GiveEvent(CUcontext context, CUevent event) { spare_events_.push_back({context, event}); }
  void Report(backend::DispatchEventKind kind, uint64_t kernel, int64_t gpu_ns);

  Driver& driver_;
  std::unique_ptr<backend::DispatchBoard> board_;
  backend::SessionDispatchSlot* slot_ = nullptr;
  std::deque<Inflight> inflight_;
  int64_t inflight_estimate_ns_ = 0;
  std::vector<SpareEvent> spare_events_;
  scheduler::KernelCostModel cost_model_{std::chrono::microseconds(500), 0.25};
};

}  // namespace curelay::executor
