// Holds a tenant session's GPU work to the scheduler's grant (backend/dispatch/dispatch_board.h) and reports each
// piece of work and the GPU time it took, measured with a pair of driver events around it. Grants are per host GPU:
// work goes by the grant of the GPU of the context current when it is issued, read from shared memory before every
// launch; the executor waits (polling every 20 us) only while that grant says no, or while its in-flight work there
// would exceed the budget a higher class imposes. A marker costs the driver about 3 us (bench/driver_bench.cc
// event_record), as much as a launch, so kernels the model already knows (under 1 ms) are timed only 1 in 64 while
// no higher class is on the GPU (ShouldTime). An untimed piece counts at its estimate and stays in flight until the
// GPU's queue, as the estimates model it, has run it, until its stream is idle, or until timed work launched after
// it completes: the scheduler still sees the work queued (saturation, turns draining). Each sample that completes
// later than the model expected moves the queue's modelled end by as much. Nothing here reads a clock per launch:
// the lane's model is brought up to date when it is polled (every 8 launches, but at most every 100 us while nobody
// depends on its completions; when a synchronize is answered; while the session waits). Sessions without a slot
// (anonymous) are not scheduled and pay nothing.
// The gate marks on the board, per GPU, whether the session has work in flight there (while its grant asks: a lower
// class that would yield to it is open there); a session whose grant says
// it yields to higher work also waits while a higher class's mark is set (it would otherwise learn of that work
// only from the backend's next grant, up to a pass of ~100 us later, and launch meanwhile), and until the grant's
// quiet time has passed since a higher class last cleared its mark (the one clock read per launch, paid only by
// such a yielding session).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "backend/dispatch/dispatch_board.h"
#include "executor/driver.h"
#include "executor/event_pool.h"
#include "scheduler/kernel_cost_model.h"

namespace curelay::executor {

class DispatchGate {
  struct GpuLane;  // below, private

 public:
  explicit DispatchGate(Driver& driver) : driver_(driver) {}
  ~DispatchGate();

  // `host_gpus`: the host GPU index of each device ordinal the driver shows this executor; empty: the same.
  bool Attach(const std::string& board_path, int slot, std::vector<int> host_gpus, std::string* error);
  bool active() const { return slot_ != nullptr; }
  // While no backend runs (BackendLink), nobody writes grants or drains reports: work starts without waiting and
  // nothing is reported, until a new backend adopts the session. Called from the link's thread.
  void SetUnscheduled(bool unscheduled) { unscheduled_.store(unscheduled, std::memory_order_release); }

  // One piece of work: the current context, its host GPU and that GPU's lane, the work's estimated GPU time, and
  // (once begun) its start marker.
  struct Timing {
    uint64_t kernel = 0;
    CUcontext context = nullptr;
    int gpu = 0;
    GpuLane* lane = nullptr;
    int64_t estimate_ns = 0;
    CUevent start = nullptr;  // null: untimed
  };
  // Work `kernel` issued now, in the context current now (work with no usable context is accounted to the
  // session's first GPU; the driver refuses it anyway).
  Timing Locate(uint64_t kernel);
  // Waits until the work may start on its GPU.
  void AwaitGrant(const Timing& timing);
  // Records the start marker of the work on `stream` if it is to be timed.
  void BeginLaunch(Timing& timing, CUstream stream);
  // After the launch: if it succeeded, records its end marker and reports it dispatched; otherwise gives the start
  // marker back.
  void EndLaunch(CUstream stream, const Timing& timing, bool launched);
  // Reports work whose end marker has completed, with its GPU time, and untimed work before it or that the lane's
  // modelled queue has run, at its estimate.
  void Poll();
  // Every context of the session has just been synchronized: all work in flight is done.
  void Settle();
  bool HasInflight() const;
  // Drops everything in flight (session teardown).
  void Release();
  // `context` is being destroyed or reset: its work in flight is reported done at its estimate and its markers are
  // never used again. `driver_frees` says whether the context's end frees the markers (cuCtxDestroy, a reset); a
  // green context's end does not, so they are destroyed here.
  void ForgetContext(CUcontext context, bool driver_frees);

 private:
  using Clock = std::chrono::steady_clock;
  // How often a launch that may start at once also looks for completed work (AwaitGrant): every 8 launches while
  // another session depends on this one's completions (a higher class limits its work in flight, or a lower class
  // yields to its marked work); otherwise only the scheduler's saturation estimate reads them, on a ~100 us pass
  // against a 2 ms threshold, and a poll waits until kRelaxedPollInterval has passed. A poll's driver queries cost
  // 0.5-1.4 us each on the H200 (measured in a PyTorch program), polls were half the gate's cost per launch.
  static constexpr uint32_t kPollEveryLaunches = 8;
  static constexpr std::chrono::microseconds kRelaxedPollInterval{100};
  // The modelled end of work launched since the last poll: not known yet.
  static constexpr Clock::time_point kNotModelled = Clock::time_point::min();
  struct Inflight {
    uint64_t kernel;
    int64_t estimate_ns;
    CUcontext context;  // events belong to the context current when they were made
    CUstream stream;
    CUevent start;      // null with `end`: untimed
    CUevent end;
    // When the lane's modelled queue runs it, less the lane's `late` at the time (kNotModelled until the next
    // poll): the queue moves later as a whole, so one offset moves every entry.
    Clock::time_point modelled_end;
  };
  // One GPU's work in flight, in launch order.
  struct GpuLane {
    int gpu;
    std::deque<Inflight> inflight;
    int64_t inflight_estimate_ns = 0;
    size_t timed_inflight = 0;  // entries of `inflight` with markers
    // When the GPU would have run this session's work launched so far there, at the estimates, one piece after
    // another (streams that overlap make it later than the truth: the scheduler then sees more queued, not less).
    Clock::time_point modelled_end{};
    // How much later than modelled the samples completed, in all, since the lane was last empty: added to every
    // entry's stored modelled end (one addition per late sample, not a walk over the queue).
    Clock::duration late{};
    uint32_t untimed_in_a_row = 0;
    int marked_class = -1;  // the class under which this lane's work is marked on the board; -1: unmarked
  };
  GpuLane& LaneOf(int gpu);
  // Whether the work gets markers: always while a higher class limits this session's in-flight work there, and for
  // a kernel measured fewer than 4 times or estimated at 1 ms or more; else every 64th piece.
  bool ShouldTime(const Timing& timing);
  void Report(backend::DispatchEventKind kind, int gpu, uint64_t kernel, int64_t gpu_ns);
  void Complete(GpuLane& lane, const Inflight& work, int64_t gpu_ns);
  // Destroys a timed launch's two events, where the driver will not (its context lives on or was not the driver's
  // to free).
  void DestroyTimingEvents(const Inflight& work);
  // Reports the lane's front entry done (untimed: at its estimate) and drops it.
  void RetireFront(GpuLane& lane, int64_t gpu_ns);
  // The lane's work mark on the board: set under `work_class` before work starts there (again if the backend
  // cleared it meanwhile, as it does when it adopts the session), cleared once nothing is in flight.
  void Mark(GpuLane& lane, uint32_t work_class);
  // `drained`: the lane's work is done (the start of its class's quiet time); not when the mark only moves or
  // stops being asked for.
  void Unmark(GpuLane& lane, bool drained = false);
  void UnmarkIfIdle(GpuLane& lane);
  // Marks the lane's work or drops its mark, as `grant` asks (marks_work: a lower class would yield to it).
  void FollowMarkRequest(GpuLane& lane, const backend::GpuGrant& grant);
  // Whether the stream of untimed `work` has nothing left to run (a program that synchronizes is idle at once, not
  // when the model says; a high-priority tenant's lingering estimate would hold lower classes back).
  bool StreamIdle(const Inflight& work);

  Driver& driver_;
  std::unique_ptr<backend::DispatchBoard> board_;
  backend::SessionDispatchSlot* slot_ = nullptr;
  int slot_index_ = -1;
  std::vector<int> host_gpus_;
  std::atomic<bool> unscheduled_{false};
  // The last context located and its GPU: a context's device never changes, and a destroyed context is forgotten
  // (ForgetContext) before its handle could name another.
  CUcontext located_context_ = nullptr;
  int located_gpu_ = 0;
  std::deque<GpuLane> lanes_;  // a handful, the GPUs this session has used; a deque keeps references stable
  EventPool events_{driver_, CU_EVENT_DEFAULT};  // start and end events of timed work
  uint32_t launches_since_poll_ = 0;
  Clock::time_point last_poll_{};
  uint64_t pieces_dispatched_ = 0;
  uint64_t pieces_timed_ = 0;
  scheduler::KernelCostModel cost_model_{std::chrono::microseconds(500), 0.25};
};

}  // namespace curelay::executor
