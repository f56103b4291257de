#include "backend/executor/dispatch_gate.h"

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
  host_gpus_ = std::move(host_gpus);
  return true;
}

void DispatchGate::Report(backend::DispatchEventKind kind, int gpu, uint64_t kernel, int64_t gpu_ns) {
  const backend::DispatchEvent event{kind, static_cast<uint32_t>(gpu), kernel, gpu_ns};
  // The backend drains every slot every ~100 us; a ring still full after a second means it is gone or stuck, and
  // the event is dropped rather than stopping the session.
  for (int attempt = 0; attempt < 50000; ++attempt) {
    if (backend::DispatchBoard::Push(*slot_, event)) return;
    Pause(20'000);
  }
  spdlog::warn("dispatch ring full for 1 s: an event was dropped");
}

DispatchGate::Timing DispatchGate::Locate() {
  Timing where;
  if (driver_.cuCtxGetCurrent != nullptr) driver_.cuCtxGetCurrent(&where.context);
  if (where.context != nullptr && where.context == located_context_) {
    where.gpu = located_gpu_;
    return where;
  }
  CUdevice device = 0;
  if (where.context == nullptr || driver_.cuCtxGetDevice(&device) != CUDA_SUCCESS || device < 0) device = 0;
  const size_t ordinal = static_cast<size_t>(device);
  where.gpu = host_gpus_.empty() ? device : ordinal < host_gpus_.size() ? host_gpus_[ordinal] : host_gpus_[0];
  if (where.gpu >= backend::kMaxDispatchGpus) where.gpu = 0;
  located_context_ = where.context;
  located_gpu_ = where.gpu;
  return where;
}

DispatchGate::GpuLane& DispatchGate::LaneOf(int gpu) {
  for (GpuLane& lane : lanes_) {
    if (lane.gpu == gpu) return lane;
  }
  return lanes_.emplace_back(GpuLane{gpu, {}, 0});
}

void DispatchGate::AwaitGrant(const Timing& where, uint64_t kernel) {
  if (slot_ == nullptr) return;
  const int64_t estimate = std::chrono::nanoseconds(cost_model_.Estimate(kernel)).count();
  const backend::GpuGrant& grant = slot_->grants[where.gpu];
  const GpuLane& lane = LaneOf(where.gpu);
  bool reported = false;
  for (;;) {
    Poll();
    const bool may_dispatch = grant.may_dispatch.load(std::memory_order_acquire) != 0;
    const int64_t budget = grant.inflight_budget_ns.load(std::memory_order_acquire);
    // Work may always start when nothing of this session's is in flight there, however large (nothing starves).
    if (may_dispatch && (lane.inflight.empty() || lane.inflight_estimate_ns <= budget - estimate)) return;
    if (!reported) {
      Report(backend::DispatchEventKind::kArrived, where.gpu, kernel, 0);
      reported = true;
    }
    Pause(20'000);
  }
}

CUevent DispatchGate::TakeEvent(CUcontext context) {
  for (auto it = spare_events_.rbegin(); it != spare_events_.rend(); ++it) {
    if (it->context != context) continue;
    CUevent event = it->event;
    spare_events_.erase(std::next(it).base());
    return event;
  }
  CUevent event = nullptr;
  return driver_.cuEventCreate(&event, CU_EVENT_DEFAULT) == CUDA_SUCCESS ? event : nullptr;
}

bool DispatchGate::ShouldTime(const Timing& where, uint64_t kernel) {
  constexpr uint32_t kMeasuredBeforeSampling = 4;
  constexpr std::chrono::nanoseconds kAlwaysTimed{10'000};
  constexpr uint32_t kSampleEvery = 16;
  GpuLane& lane = LaneOf(where.gpu);
  const bool limited = slot_->grants[where.gpu].inflight_budget_ns.load(std::memory_order_acquire) !=
                       std::numeric_limits<int64_t>::max();
  const auto measured = times_measured_.find(kernel);
  if (lane.inflight.empty()) lane.behind = false;
  bool timed = limited || lane.behind || measured == times_measured_.end() ||
               measured->second < kMeasuredBeforeSampling || cost_model_.Estimate(kernel) >= kAlwaysTimed;
  if (!timed && ++lane.untimed_in_a_row >= kSampleEvery) {
    // The previous sample still running 16 pieces later: the GPU is behind, so time everything until it catches
    // up (the markers then cost no throughput, and the backlog stays measured).
    lane.behind = !lane.inflight.empty();
    timed = true;
  }
  if (timed) lane.untimed_in_a_row = 0;
  return timed;
}

void DispatchGate::BeginLaunch(uint64_t kernel, Timing& timing, CUstream stream) {
  if (slot_ == nullptr || !ShouldTime(timing, kernel)) return;
  timing.start = TakeEvent(timing.context);
  if (timing.start != nullptr && driver_.cuEventRecord(timing.start, stream) != CUDA_SUCCESS) {
    GiveEvent(timing.context, timing.start);
    timing.start = nullptr;
  }
}

void DispatchGate::EndLaunch(uint64_t kernel, CUstream stream, const Timing& timing, bool launched) {
  if (slot_ == nullptr) return;
  if (!launched) {
    if (timing.start != nullptr) GiveEvent(timing.context, timing.start);
    return;
  }
  Report(backend::DispatchEventKind::kDispatched, timing.gpu, kernel, 0);
  ++pieces_dispatched_;
  pieces_timed_ += timing.start != nullptr;
  const int64_t estimate = std::chrono::nanoseconds(cost_model_.Estimate(kernel)).count();
  CUevent end = timing.start != nullptr ? TakeEvent(timing.context) : nullptr;
  if (end == nullptr || driver_.cuEventRecord(end, stream) != CUDA_SUCCESS) {
    // Untimed (by choice, or a marker failed): the scheduler hears of the completion at once, at the estimate.
    if (end != nullptr) GiveEvent(timing.context, end);
    if (timing.start != nullptr) GiveEvent(timing.context, timing.start);
    Report(backend::DispatchEventKind::kCompleted, timing.gpu, kernel, estimate);
    return;
  }
  GpuLane& lane = LaneOf(timing.gpu);
  lane.inflight.push_back({kernel, estimate, timing.context, timing.start, end});
  lane.inflight_estimate_ns += estimate;
}

void DispatchGate::Complete(GpuLane& lane, const Inflight& work, int64_t gpu_ns) {
  Report(backend::DispatchEventKind::kCompleted, lane.gpu, work.kernel, gpu_ns);
  lane.inflight_estimate_ns -= work.estimate_ns;
}

void DispatchGate::Poll() {
  // Per GPU in launch order, up to the first launch still running: Poll runs before every launch, so it must cost
  // one query per busy GPU when nothing finished. Launches on other streams that finish earlier are reported when
  // those before them are (their in-flight estimate lingers meanwhile, which only makes a budget stricter).
  for (GpuLane& lane : lanes_) {
    while (!lane.inflight.empty()) {
      const Inflight& work = lane.inflight.front();
      const CUresult state = driver_.cuEventQuery(work.end);
      if (state == CUDA_ERROR_NOT_READY) break;
      float milliseconds = 0;
      int64_t gpu_ns = work.estimate_ns;
      if (state == CUDA_SUCCESS && driver_.cuEventElapsedTime(&milliseconds, work.start, work.end) == CUDA_SUCCESS) {
        gpu_ns = static_cast<int64_t>(static_cast<double>(milliseconds) * 1e6);
        cost_model_.Observe(work.kernel, std::chrono::nanoseconds(gpu_ns));
        uint32_t& measured = times_measured_[work.kernel];
        measured = std::min<uint32_t>(measured + 1, 1000);
      }
      Complete(lane, work, gpu_ns);
      GiveEvent(work.context, work.start);
      GiveEvent(work.context, work.end);
      lane.inflight.pop_front();
    }
  }
}

bool DispatchGate::HasInflight() const {
  for (const GpuLane& lane : lanes_) {
    if (!lane.inflight.empty()) return true;
  }
  return false;
}

void DispatchGate::ForgetContext(CUcontext context) {
  if (located_context_ == context) located_context_ = nullptr;
  for (GpuLane& lane : lanes_) {
    std::erase_if(lane.inflight, [&](const Inflight& work) {
      if (work.context != context) return false;
      Complete(lane, work, work.estimate_ns);
      return true;
    });
  }
  std::erase_if(spare_events_, [context](const SpareEvent& spare) { return spare.context == context; });
}

void DispatchGate::Release() {
  for (GpuLane& lane : lanes_) {
    for (const Inflight& work : lane.inflight) {
      driver_.cuEventDestroy(work.start);
      driver_.cuEventDestroy(work.end);
    }
  }
  lanes_.clear();
  for (const SpareEvent& spare : spare_events_) driver_.cuEventDestroy(spare.event);
  spare_events_.clear();
}

}  // namespace curelay::executor
