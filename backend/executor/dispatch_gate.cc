#include "backend/executor/dispatch_gate.h"

#include <spdlog/spdlog.h>
#include <time.h>

#include <chrono>
#include <iterator>

namespace curelay::executor {
namespace {

void Pause(long nanoseconds) {
  struct timespec pause = {0, nanoseconds};
  nanosleep(&pause, nullptr);
}

}  // namespace

DispatchGate::~DispatchGate() { Release(); }

bool DispatchGate::Attach(const std::string& board_path, int slot, std::string* error) {
  if (board_path.empty() || slot < 0) return true;
  if (slot >= backend::kMaxDispatchSessions) {
    *error = "dispatch slot out of range";
    return false;
  }
  board_.reset(backend::DispatchBoard::Open(board_path, error));
  if (board_ == nullptr) return false;
  slot_ = &board_->slot(slot);
  return true;
}

void DispatchGate::Report(backend::DispatchEventKind kind, uint64_t kernel, int64_t gpu_ns) {
  const backend::DispatchEvent event{kind, 0, kernel, gpu_ns};
  // The backend drains every slot every ~100 us; a ring still full after a second means it is gone or stuck, and
  // the event is dropped rather than stopping the session.
  for (int attempt = 0; attempt < 50000; ++attempt) {
    if (backend::DispatchBoard::Push(*slot_, event)) return;
    Pause(20'000);
  }
  spdlog::warn("dispatch ring full for 1 s: an event was dropped");
}

void DispatchGate::AwaitGrant(uint64_t kernel) {
  if (slot_ == nullptr) return;
  const int64_t estimate = std::chrono::nanoseconds(cost_model_.Estimate(kernel)).count();
  bool reported = false;
  for (;;) {
    Poll();
    const bool may_dispatch = slot_->may_dispatch.load(std::memory_order_acquire) != 0;
    const int64_t budget = slot_->inflight_budget_ns.load(std::memory_order_acquire);
    // Work may always start when nothing of this session's is in flight, however large (nothing starves).
    if (may_dispatch && (inflight_.empty() || inflight_estimate_ns_ <= budget - estimate)) return;
    if (!reported) {
      Report(backend::DispatchEventKind::kArrived, kernel, 0);
      reported = true;
    }
    Pause(20'000);
  }
}

CUcontext DispatchGate::CurrentContext() const {
  CUcontext context = nullptr;
  if (driver_.cuCtxGetCurrent != nullptr) driver_.cuCtxGetCurrent(&context);
  return context;
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

DispatchGate::Timing DispatchGate::BeginLaunch(CUstream stream) {
  Timing timing;
  if (slot_ == nullptr) return timing;
  timing.context = CurrentContext();
  timing.start = TakeEvent(timing.context);
  if (timing.start != nullptr && driver_.cuEventRecord(timing.start, stream) != CUDA_SUCCESS) {
    GiveEvent(timing.context, timing.start);
    timing.start = nullptr;
  }
  return timing;
}

void DispatchGate::EndLaunch(uint64_t kernel, CUstream stream, const Timing& timing, bool launched) {
  if (slot_ == nullptr) return;
  if (!launched) {
    if (timing.start != nullptr) GiveEvent(timing.context, timing.start);
    return;
  }
  Report(backend::DispatchEventKind::kDispatched, kernel, 0);
  const int64_t estimate = std::chrono::nanoseconds(cost_model_.Estimate(kernel)).count();
  CUevent end = timing.start != nullptr ? TakeEvent(timing.context) : nullptr;
  if (end == nullptr || driver_.cuEventRecord(end, stream) != CUDA_SUCCESS) {
    // Untimed: the scheduler hears of the completion at once with the estimate as its time.
    if (end != nullptr) GiveEvent(timing.context, end);
    if (timing.start != nullptr) GiveEvent(timing.context, timing.start);
    Report(backend::DispatchEventKind::kCompleted, kernel, estimate);
    return;
  }
  inflight_.push_back({kernel, estimate, timing.context, timing.start, end});
  inflight_estimate_ns_ += estimate;
}

void DispatchGate::Poll() {
  // In launch order, up to the first launch still running: Poll runs before every launch, so it must cost one
  // query when nothing finished. Launches on other streams that finish earlier are reported when those before
  // them are (their in-flight estimate lingers meanwhile, which only makes a budget stricter).
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    const CUresult state = driver_.cuEventQuery(it->end);
    if (state == CUDA_ERROR_NOT_READY) break;
    float milliseconds = 0;
    int64_t gpu_ns = it->estimate_ns;
    if (state == CUDA_SUCCESS && driver_.cuEventElapsedTime(&milliseconds, it->start, it->end) == CUDA_SUCCESS) {
      gpu_ns = static_cast<int64_t>(static_cast<double>(milliseconds) * 1e6);
      cost_model_.Observe(it->kernel, std::chrono::nanoseconds(gpu_ns));
    }
    Report(backend::DispatchEventKind::kCompleted, it->kernel, gpu_ns);
    inflight_estimate_ns_ -= it->estimate_ns;
    GiveEvent(it->context, it->start);
    GiveEvent(it->context, it->end);
    it = inflight_.erase(it);
  }
}

void DispatchGate::ForgetContext(CUcontext context) {
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    if (it->context != context) {
      ++it;
      continue;
    }
    Report(backend::DispatchEventKind::kCompleted, it->kernel, it->estimate_ns);
    inflight_estimate_ns_ -= it->estimate_ns;
    it = inflight_.erase(it);
  }
  std::erase_if(spare_events_, [context](const SpareEvent& spare) { return spare.context == context; });
}

void DispatchGate::Release() {
  for (const Inflight& launch : inflight_) {
    driver_.cuEventDestroy(launch.start);
    driver_.cuEventDestroy(launch.end);
  }
  inflight_.clear();
  inflight_estimate_ns_ = 0;
  for (const SpareEvent& spare : spare_events_) driver_.cuEventDestroy(spare.event);
  spare_events_.clear();
}

}  // namespace curelay::executor
