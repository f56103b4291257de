#include "executor/dispatch_gate.h"

#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <iterator>

namespace curelay::executor {
namespace {

void Pause(long nanoseconds) {
  struct timespec pause = {0, nanoseconds};
  nanosleep(&pause, nullptr);
}

// The board's clock: steady_clock is CLOCK_MONOTONIC, the same in every process of the host.
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

DispatchGate::~DispatchGate() {
  if (pieces_dispatched_ > 0) {
    spdlog::info("scheduled work: {} pieces dispatched, {} timed with markers", pieces_dispatched_, pieces_timed_);
  }
  Release();
}

bool DispatchGate::Attach(const std::string& board_path, int slot, std::vector<int> host_gpus, std::string* error) {
  if (board_path.empty() || slot < 0) return true;
  if (slot >= backend::kMaxDispatchSessions) {
    *error = "dispatch slot out of range";
    return false;
  }
  board_.reset(backend::DispatchBoard::Open(board_path, error));
  if (board_ == nullptr) return false;
  slot_ = &board_->slot(slot);
  slot_index_ = slot;
  host_gpus_ = std::move(host_gpus);
  return true;
}

void DispatchGate::Report(backend::DispatchEventKind kind, int gpu, uint64_t kernel, int64_t gpu_ns) {
  if (unscheduled_.load(std::memory_order_acquire)) return;  // no backend to read it
  const backend::DispatchEvent event{kind, static_cast<uint32_t>(gpu), kernel, gpu_ns};
  // The backend drains every slot every ~100 us; a ring still full after a second means it is gone or stuck, and
  // the event is dropped rather than stopping the session.
  for (int attempt = 0; attempt < 50000; ++attempt) {
    if (backend::DispatchBoard::Push(*slot_, event)) return;
    Pause(20'000);
  }
  spdlog::warn("dispatch ring full for 1 s: an event was dropped");
}

DispatchGate::Timing DispatchGate::Locate(uint64_t kernel) {
  Timing timing;
  timing.kernel = kernel;
  if (driver_.cuCtxGetCurrent != nullptr) driver_.cuCtxGetCurrent(&timing.context);
  if (timing.context == nullptr || timing.context != located_context_) {
    CUdevice device = 0;
    if (timing.context == nullptr || driver_.cuCtxGetDevice(&device) != CUDA_SUCCESS || device < 0) device = 0;
    const size_t ordinal = static_cast<size_t>(device);
    int gpu = host_gpus_.empty() ? device : ordinal < host_gpus_.size() ? host_gpus_[ordinal] : host_gpus_[0];
    located_context_ = timing.context;
    located_gpu_ = gpu >= 0 && gpu < backend::kMaxDispatchGpus ? gpu : 0;
  }
  timing.gpu = located_gpu_;
  timing.lane = &LaneOf(timing.gpu);
  timing.estimate_ns = std::chrono::nanoseconds(cost_model_.Estimate(kernel)).count();
  return timing;
}

DispatchGate::GpuLane& DispatchGate::LaneOf(int gpu) {
  for (GpuLane& lane : lanes_) {
    if (lane.gpu == gpu) return lane;
  }
  return lanes_.emplace_back(GpuLane{gpu, {}, 0});
}

void DispatchGate::AwaitGrant(const Timing& timing) {
  if (slot_ == nullptr) return;
  const backend::GpuGrant& grant = slot_->grants[timing.gpu];
  const GpuLane& lane = *timing.lane;
  bool reported = false;
  for (bool first = true;; first = false) {
    if (unscheduled_.load(std::memory_order_acquire)) return;  // grants are frozen: nobody would change them
    const bool may_dispatch = grant.may_dispatch.load(std::memory_order_acquire) != 0;
    const int64_t budget = grant.inflight_budget_ns.load(std::memory_order_acquire);
    const uint32_t work_class = grant.work_class.load(std::memory_order_acquire);
    // A class changed since the lane was marked: the old mark goes first (a demoted session would otherwise yield to
    // its own work).
    if (lane.marked_class >= 0 && lane.marked_class != static_cast<int>(work_class)) Unmark(*timing.lane);
    // Higher work the scheduler may not have heard of yet holds this session as its grant soon will, and so does
    // higher work that drained moments ago: its next request is likely on its way (the grant's quiet time).
    const int64_t quiet_ns = grant.higher_quiet_ns.load(std::memory_order_acquire);
    const bool yield = grant.yields_to_higher_work.load(std::memory_order_acquire) != 0 &&
                       (board_->HigherClassHasWork(timing.gpu, work_class) ||
                        (quiet_ns > 0 && board_->HigherClassDrainedWithin(timing.gpu, work_class, NowNs(), quiet_ns)));
    // Work may always start when nothing of this session's is in flight there, however large (nothing starves).
    if (may_dispatch && !yield && (lane.inflight.empty() || lane.inflight_estimate_ns <= budget - timing.estimate_ns)) {
      // Completions need not reach the scheduler sooner than its 100 us pass, and a launch-bound tenant launches
      // every few microseconds: an event query (a driver call) and a clock read before each would be paid on every
      // launch. (Before the mark: a poll that empties the lane clears it, and this launch must go marked.)
      if (first && ++launches_since_poll_ >= kPollEveryLaunches) {
        const bool depended_on = budget != std::numeric_limits<int64_t>::max() ||
                                 grant.marks_work.load(std::memory_order_acquire) != 0;
        if (depended_on || Clock::now() - last_poll_ >= kRelaxedPollInterval) Poll();
      }
      FollowMarkRequest(*timing.lane, grant);
      return;
    }
    if (!first) {
      if (!reported) {
        Report(backend::DispatchEventKind::kArrived, timing.gpu, timing.kernel, 0);
        reported = true;
      }
      Pause(20'000);
    }
    Poll();  // completions may be what frees the budget
  }
}

bool DispatchGate::ShouldTime(const Timing& timing) {
  constexpr uint32_t kMeasuredBeforeSampling = 4;
  // Long kernels are always timed: their share of a weighted turn matters, and two markers are nothing beside them.
  // Shorter ones are sampled like small ones: two markers are two driver calls (~3 us each) on a launch-bound
  // tenant's every launch.
  constexpr int64_t kAlwaysTimedNs = 1'000'000;
  // A steady kernel's estimate needs few samples; at 1 in 16 a co-located launch-bound tenant paid a few percent
  // over the unscheduled pair, markers the likeliest part (docs/scheduling.md). New, long and budget-limited work
  // is timed every time anyway.
  constexpr uint32_t kSampleEvery = 64;
  GpuLane& lane = *timing.lane;
  const bool limited = slot_->grants[timing.gpu].inflight_budget_ns.load(std::memory_order_acquire) !=
                       std::numeric_limits<int64_t>::max();
  // Sampling goes on however far behind the GPU is: behind because another tenant's work shares it, a launch-bound
  // tenant would pay markers on every launch. The backlog stays visible in the model, which each sample corrects.
  bool timed = limited || cost_model_.Observations(timing.kernel) < kMeasuredBeforeSampling ||
               timing.estimate_ns >= kAlwaysTimedNs;
  if (!timed && ++lane.untimed_in_a_row >= kSampleEvery) timed = true;
  if (timed) lane.untimed_in_a_row = 0;
  return timed;
}

void DispatchGate::BeginLaunch(Timing& timing, CUstream stream) {
  if (slot_ == nullptr || !ShouldTime(timing)) return;
  timing.start = events_.Take(timing.context);
  if (timing.start != nullptr && driver_.cuEventRecord(timing.start, stream) != CUDA_SUCCESS) {
    events_.Give(timing.context, timing.start);
    timing.start = nullptr;
  }
}

void DispatchGate::EndLaunch(CUstream stream, const Timing& timing, bool launched) {
  if (slot_ == nullptr) return;
  if (!launched) {
    if (timing.start != nullptr) events_.Give(timing.context, timing.start);
    UnmarkIfIdle(*timing.lane);  // marked for a launch that did not happen: nothing may be in flight
    return;
  }
  Report(backend::DispatchEventKind::kDispatched, timing.gpu, timing.kernel, timing.estimate_ns);
  ++pieces_dispatched_;
  GpuLane& lane = *timing.lane;
  CUevent start = timing.start;
  CUevent end = start != nullptr ? events_.Take(timing.context) : nullptr;
  if (end != nullptr && driver_.cuEventRecord(end, stream) != CUDA_SUCCESS) {
    events_.Give(timing.context, end);
    end = nullptr;
  }
  if (end == nullptr && start != nullptr) {  // a marker failed: untimed after all
    events_.Give(timing.context, start);
    start = nullptr;
  }
  pieces_timed_ += start != nullptr;
  lane.timed_inflight += start != nullptr;
  lane.inflight.push_back({timing.kernel, timing.estimate_ns, timing.context, stream, start, end, kNotModelled});
  lane.inflight_estimate_ns += timing.estimate_ns;
}

void DispatchGate::Mark(GpuLane& lane, uint32_t work_class) {
  const int marked = static_cast<int>(work_class);
  // The class changed (the tenant's priority did): the work in flight counts under the new one from now on.
  if (lane.marked_class != marked) Unmark(lane);
  lane.marked_class = marked;
  if (!board_->WorkMarked(slot_index_, lane.gpu, work_class)) board_->MarkWork(slot_index_, lane.gpu, work_class, true);
}

void DispatchGate::Unmark(GpuLane& lane, bool drained) {
  if (lane.marked_class < 0) return;
  board_->MarkWork(slot_index_, lane.gpu, static_cast<uint32_t>(lane.marked_class), false);
  if (drained) board_->NoteDrained(lane.gpu, static_cast<uint32_t>(lane.marked_class), NowNs());
  lane.marked_class = -1;
}

void DispatchGate::UnmarkIfIdle(GpuLane& lane) {
  if (lane.inflight.empty()) Unmark(lane, /*drained=*/true);
}

void DispatchGate::FollowMarkRequest(GpuLane& lane, const backend::GpuGrant& grant) {
  if (grant.marks_work.load(std::memory_order_acquire) != 0) {
    Mark(lane, grant.work_class.load(std::memory_order_acquire));
  } else {
    Unmark(lane);  // nobody yields to it any more
  }
}

void DispatchGate::RetireFront(GpuLane& lane, int64_t gpu_ns) {
  const Inflight& work = lane.inflight.front();
  Complete(lane, work, gpu_ns);
  if (work.start != nullptr) {
    events_.Give(work.context, work.start);
    events_.Give(work.context, work.end);
    --lane.timed_inflight;
  }
  lane.inflight.pop_front();
}

void DispatchGate::Complete(GpuLane& lane, const Inflight& work, int64_t gpu_ns) {
  Report(backend::DispatchEventKind::kCompleted, lane.gpu, work.kernel, gpu_ns);
  lane.inflight_estimate_ns -= work.estimate_ns;
}

void DispatchGate::Poll() {
  // Per GPU in launch order: Poll runs every few launches, so it must cost at most a query or two per busy GPU when
  // nothing finished. Timed work is done when its end marker is, and so is (taken to be) everything launched before
  // it; launches on other streams that finish earlier are reported when those before them are (their in-flight
  // estimate lingers meanwhile, which only makes a budget stricter). Untimed work at the front is done when the
  // modelled queue has run it or its stream is idle.
  launches_since_poll_ = 0;
  if (lanes_.empty()) return;
  const Clock::time_point now = Clock::now();
  last_poll_ = now;
  // The last stream found idle in this poll (one query per stream and poll, not per piece).
  bool found_idle = false;
  CUstream idle_stream = nullptr;
  CUcontext idle_context = nullptr;
  for (GpuLane& lane : lanes_) {
    // Work launched since the last poll (a few launches ago at most) joins the modelled queue as if launched now.
    auto newest = lane.inflight.end();
    while (newest != lane.inflight.begin() && std::prev(newest)->modelled_end == kNotModelled) --newest;
    for (; newest != lane.inflight.end(); ++newest) {
      lane.modelled_end = std::max(lane.modelled_end, now) + std::chrono::nanoseconds(newest->estimate_ns);
      newest->modelled_end = lane.modelled_end - lane.late;
    }
    while (!lane.inflight.empty()) {
      const Inflight& front = lane.inflight.front();
      if (front.start == nullptr) {
        bool done = front.modelled_end + lane.late <= now ||
                    (found_idle && idle_stream == front.stream && idle_context == front.context);
        // One driver query per lane and poll: with timed work in flight, its end marker's query below retires
        // the untimed work before it too, so the stream is asked only when nothing is timed.
        if (!done && lane.timed_inflight == 0 && StreamIdle(front)) {
          done = found_idle = true;
          idle_stream = front.stream;
          idle_context = front.context;
        }
        if (done) {
          RetireFront(lane, front.estimate_ns);
          continue;
        }
      }
      if (lane.timed_inflight == 0) break;
      const auto timed = std::find_if(lane.inflight.begin(), lane.inflight.end(),
                                      [](const Inflight& work) { return work.start != nullptr; });
      const CUresult state = driver_.cuEventQuery(timed->end);
      if (state == CUDA_ERROR_NOT_READY) break;
      while (lane.inflight.front().start == nullptr) RetireFront(lane, lane.inflight.front().estimate_ns);
      const Inflight& work = lane.inflight.front();
      float milliseconds = 0;
      int64_t gpu_ns = work.estimate_ns;
      if (state == CUDA_SUCCESS && driver_.cuEventElapsedTime(&milliseconds, work.start, work.end) == CUDA_SUCCESS) {
        gpu_ns = static_cast<int64_t>(static_cast<double>(milliseconds) * 1e6);
        cost_model_.Observe(work.kernel, std::chrono::nanoseconds(gpu_ns));
      }
      // Done later than modelled: the GPU runs behind the model (a neighbour's work shares it, or the estimates are
      // short), and what is queued after it is later by as much.
      const Clock::time_point expected = work.modelled_end + lane.late;
      const Clock::duration late = now > expected ? now - expected : Clock::duration::zero();
      RetireFront(lane, gpu_ns);
      lane.late += late;
      lane.modelled_end += late;
    }
    if (lane.inflight.empty()) lane.late = Clock::duration::zero();  // no stored end refers to it any more
    UnmarkIfIdle(lane);
    // Work still in flight keeps its mark: set again if a backend cleared it (adopting the session) or began asking
    // for it (a lower class opened while this work runs).
    if (!lane.inflight.empty() && slot_ != nullptr) FollowMarkRequest(lane, slot_->grants[lane.gpu]);
  }
}

bool DispatchGate::StreamIdle(const Inflight& work) {
  if (work.stream == nullptr) {  // the legacy stream of the context current when it was queried
    CUcontext current = nullptr;
    if (driver_.cuCtxGetCurrent == nullptr || driver_.cuCtxGetCurrent(&current) != CUDA_SUCCESS ||
        current != work.context) {
      return false;
    }
  }
  // A stream destroyed since has nothing left either (its handle answers an error).
  return driver_.cuStreamQuery(work.stream) != CUDA_ERROR_NOT_READY;
}

void DispatchGate::Settle() {
  Poll();  // timed work first, with its measured times
  for (GpuLane& lane : lanes_) {
    while (!lane.inflight.empty()) RetireFront(lane, lane.inflight.front().estimate_ns);
    UnmarkIfIdle(lane);
  }
}

bool DispatchGate::HasInflight() const {
  for (const GpuLane& lane : lanes_) {
    if (!lane.inflight.empty()) return true;
  }
  return false;
}

void DispatchGate::ForgetContext(CUcontext context, bool driver_frees) {
  if (located_context_ == context) located_context_ = nullptr;
  for (GpuLane& lane : lanes_) {
    std::erase_if(lane.inflight, [&](const Inflight& work) {
      if (work.context != context) return false;
      Complete(lane, work, work.estimate_ns);
      lane.timed_inflight -= work.start != nullptr;
      if (!driver_frees) DestroyTimingEvents(work);
      return true;
    });
    UnmarkIfIdle(lane);
  }
  if (driver_frees) {
    events_.Forget(context);
  } else {
    events_.Release(context);
  }
}

void DispatchGate::DestroyTimingEvents(const Inflight& work) {
  if (work.start == nullptr) return;
  driver_.cuEventDestroy(work.start);
  driver_.cuEventDestroy(work.end);
}

void DispatchGate::Release() {
  for (GpuLane& lane : lanes_) {
    Unmark(lane);
    for (const Inflight& work : lane.inflight) DestroyTimingEvents(work);
  }
  lanes_.clear();
  events_.Release();
}

}  // namespace curelay::executor
