// Memory turns, the executor's side (docs/scheduling.md, "Memory oversubscription"). A session of a tenant whose
// memory policy is `swap` makes its large allocations movable (swappable_memory.h). When the GPU cannot hold what
// it asks for, beside the backend's reserve, it waits in the backend's queue (its shortfall on the quota board);
// the backend's residency service asks other sessions to swap out until the head of the queue fits. A session
// asked to swap out drains its work, copies its movable memory into the extent of the swap space the backend gave
// it and releases it; its next request brings it back, in its turn. Everything runs on the session's thread,
// between requests, so no request ever sees memory moving.
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <thread>

#include "executor/session.h"
#include "scheduler/memory_turns.h"

namespace curelay::executor {
namespace {

int64_t MonotonicNs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

constexpr auto kQueuePoll = std::chrono::milliseconds(2);

// Extents start at whole blocks of the swap space; copies keep within the pieces it is page-locked in.
static_assert(backend::kSwapSpaceBlockBytes % SwapSpace::kLockPieceBytes == 0);

}  // namespace

void Session::RestoreCurrentContext() {
  // Swapping makes the allocations' contexts current in turn; the session's bookkeeping says which one the client
  // had (none when unknown).
  driver_.cuCtxSetCurrent(CurrentDriverContext());
}

bool Session::Swapping() const {
  return swap_space_.available() && swappable_.Supported() && memory_quota_.swap_policy();
}

int Session::HostGpu(int device) const {
  if (host_gpus_.empty()) return device;
  const auto ordinal = static_cast<size_t>(device);
  return device >= 0 && ordinal < host_gpus_.size() ? host_gpus_[ordinal] : host_gpus_[0];
}

void Session::PublishMovable() {
  backend::SessionResidency* residency = memory_quota_.residency();
  if (residency == nullptr) return;
  // Its first turn starts with its first movable memory (a slot's times start at zero: "resident since boot").
  if (residency->resident_since_ns.load() == 0) {
    residency->resident_since_ns.store(MonotonicNs());
    residency->last_active_ns.store(MonotonicNs());
  }
  residency->movable_bytes.store(swappable_.movable_bytes());
  const int device = swappable_.SoleDevice();
  if (device >= 0) residency->gpu.store(HostGpu(device));
  // Memory on several GPUs cannot be planned on one GPU's turns.
  if (device < 0 && !swappable_.empty()) {
    residency->unswappable.store(static_cast<uint32_t>(backend::SwapRefusal::kSeveralGpus));
  }
}

CUresult Session::BeforeRequest() {
  backend::SessionResidency* residency = memory_quota_.residency();
  if (residency == nullptr || swappable_.empty()) return CUDA_SUCCESS;
  residency->last_active_ns.store(MonotonicNs(), std::memory_order_relaxed);
  AnswerSwapOutRequest();
  return swappable_.swapped_out() ? EnsureResident() : CUDA_SUCCESS;
}

CUresult Session::AllocateMovable(uint64_t bytes, CUdeviceptr* ptr) {
  CUdevice device = 0;
  if (const CUresult result = driver_.cuCtxGetDevice(&device); result != CUDA_SUCCESS) return result;
  const uint64_t size = swappable_.MovableSize(device, bytes);
  const int sole = swappable_.SoleDevice();
  // Small allocations, and any on a second GPU, stay ordinary (resident for the session's life).
  if (size == 0 || (sole >= 0 && sole != device)) return driver_.cuMemAlloc(ptr, bytes);
  size_t free = 0, total = 0;
  if (const CUresult result = driver_.cuMemGetInfo(&free, &total); result != CUDA_SUCCESS) return result;
  // A resident session takes memory that is free beside the reserve (sessions that fit run together); only what
  // does not fit sends it to the queue.
  if (free < size || free - size < memory_quota_.gpu_reserve_bytes()) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUcontext context = CurrentDriverContext();
  const CUresult result = swappable_.Allocate(context, device, bytes, ptr);
  if (result != CUDA_SUCCESS) return result;
  PublishMovable();
  // Its home in the swap space is page-locked from now on, so that no swap-out waits for that.
  if (backend::SessionResidency* residency = memory_quota_.residency()) {
    swap_space_.LockAhead(context, &residency->home_offset, &residency->home_bytes);
  }
  return CUDA_SUCCESS;
}

CUresult Session::AwaitMemory(uint64_t bytes, std::chrono::steady_clock::time_point deadline) {
  backend::SessionResidency* residency = memory_quota_.residency();
  if (residency == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  residency->rejected.store(0);
  // Its place in the queue: kept while it retries (an allocation that lost the freed memory to another session
  // waits on, as old as it was).
  if (residency->shortfall_bytes.load() == 0) residency->waiting_since_ns.store(MonotonicNs());
  // Success keeps its shortfall published until the allocation it waited for is made (AllocateCharged clears it):
  // a retry keeps its place.
  const auto stop_waiting = [&](CUresult result) {
    if (result == CUDA_SUCCESS) {
      residency->resident_since_ns.store(MonotonicNs());  // its turn starts now
    } else {
      residency->shortfall_bytes.store(0);
    }
    return result;
  };
  for (uint64_t polls = 0;; ) {
    AnswerSwapOutRequest();  // the backend may ask a waiter to leave too
    size_t free = 0, total = 0;
    if (driver_.cuMemGetInfo(&free, &total) != CUDA_SUCCESS) return stop_waiting(CUDA_ERROR_OUT_OF_MEMORY);
    const uint64_t own = swappable_.swapped_out() ? swappable_.movable_bytes() : 0;
    const uint64_t wanted = bytes + own + memory_quota_.gpu_reserve_bytes();
    const uint64_t shortfall = free >= wanted ? 0 : wanted - free;
    if (shortfall == 0 && residency->admitted.load() != 0) {
      // Its turn: memory that left while it waited comes back first, so nothing is ever made beside memory that
      // is out (the store's layout is the allocations' as they were).
      const CUresult back = swappable_.swapped_out() ? SwapInNow() : CUDA_SUCCESS;
      if (back == CUDA_SUCCESS) return stop_waiting(CUDA_SUCCESS);
      if (back != CUDA_ERROR_OUT_OF_MEMORY) return stop_waiting(back);
    }
    residency->shortfall_bytes.store(std::max<uint64_t>(shortfall, scheduler::kFitsNow));
    // The backend judged the shortfall published before: when the memory that left since covers it (this request
    // fits now), that rejection is moot, and the session waits to be admitted (seen in CI: the other session
    // finished swapping out between the two, and the stale shortfall looked infeasible with nobody left to move).
    if (shortfall == 0 && residency->rejected.load() != 0) residency->rejected.store(0);
    if (residency->rejected.load() != 0) {
      spdlog::warn("the GPU cannot hold {} MiB more for this session even with others swapped out: out of memory",
                   (bytes + own) >> 20);
      return stop_waiting(CUDA_ERROR_OUT_OF_MEMORY);
    }
    if (std::chrono::steady_clock::now() >= deadline) return stop_waiting(CUDA_ERROR_OUT_OF_MEMORY);
    // A client that is gone waits for nothing: the session ends (its memory, out or in, is released).
    if (++polls % 50 == 0 && channel_->PeerLost()) {
      spdlog::info("the client left while its session waited for memory");
      return stop_waiting(CUDA_ERROR_OUT_OF_MEMORY);
    }
    std::this_thread::sleep_for(kQueuePoll);
  }
}

CUresult Session::SwapInNow() {
  backend::SessionResidency* residency = memory_quota_.residency();
  const uint8_t* store = swap_space_.At(residency->store_offset.load(), swappable_.movable_bytes());
  residency->residency.store(2);  // moving: the backend keeps the extent until it is resident again
  const int64_t start = MonotonicNs();
  const CUresult result =
      store != nullptr ? swappable_.SwapIn(store, SwapSpace::kLockPieceBytes) : CUDA_ERROR_INVALID_VALUE;
  RestoreCurrentContext();  // the copies ran in the allocations' contexts
  if (result != CUDA_SUCCESS) {
    residency->residency.store(1);
    if (result != CUDA_ERROR_OUT_OF_MEMORY) spdlog::error("swapping in failed (CUresult {})", static_cast<int>(result));
    return result;
  }
  const int64_t elapsed = MonotonicNs() - start;
  residency->swap_ins.fetch_add(1);
  residency->swap_in_ns.fetch_add(static_cast<uint64_t>(elapsed));
  residency->swap_in_bytes.fetch_add(swappable_.movable_bytes());
  residency->resident_since_ns.store(MonotonicNs());
  residency->residency.store(0);
  spdlog::info("swapped in {} MiB in {:.3f} s", swappable_.movable_bytes() >> 20, elapsed / 1e9);
  return CUDA_SUCCESS;
}

std::chrono::steady_clock::time_point Session::MemoryWaitDeadline() const {
  const uint32_t timeout_ms = memory_quota_.wait_timeout_ms();
  return timeout_ms == 0 ? std::chrono::steady_clock::time_point::max()  // 0: for as long as it takes
                         : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
}

CUresult Session::EnsureResident() {
  backend::SessionResidency* residency = memory_quota_.residency();
  const auto deadline = MemoryWaitDeadline();
  for (;;) {
    if (!swappable_.swapped_out()) {  // AwaitMemory brought it back when its turn came
      residency->shortfall_bytes.store(0);
      return CUDA_SUCCESS;
    }
    size_t free = 0, total = 0;
    const uint64_t wanted = swappable_.movable_bytes() + memory_quota_.gpu_reserve_bytes();
    const bool queue_ahead = memory_quota_.waiting_on_gpu(residency->gpu.load()) != 0 &&
                             residency->admitted.load() == 0;
    if (driver_.cuMemGetInfo(&free, &total) == CUDA_SUCCESS && free >= wanted && !queue_ahead) {
      const CUresult result = SwapInNow();
      if (result == CUDA_SUCCESS) {
        residency->shortfall_bytes.store(0);
        return CUDA_SUCCESS;
      }
      if (result != CUDA_ERROR_OUT_OF_MEMORY) return result;
    }
    if (AwaitMemory(0, deadline) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

CUresult Session::Quiesce() {
  if (!remote_host_functions_.empty() || !captures_.empty()) return CUDA_ERROR_NOT_READY;
  if (HostNodesOutstanding()) return CUDA_ERROR_NOT_READY;
  CUresult result = CUDA_SUCCESS;
  for (const auto& [id, context] : contexts_) {
    result = driver_.cuCtxSetCurrent(context);
    if (result == CUDA_SUCCESS) result = driver_.cuCtxSynchronize();
    // A primary context released since holds no work.
    if (result == CUDA_ERROR_INVALID_CONTEXT || result == CUDA_ERROR_CONTEXT_IS_DESTROYED) result = CUDA_SUCCESS;
    if (result != CUDA_SUCCESS) break;
  }
  RestoreCurrentContext();
  if (result != CUDA_SUCCESS) return result;
  // The work is done: the client's waits are answered now, and the scheduler hears of the completions.
  if (!pending_waits_.empty()) PollPendingWaits();
  dispatch_gate_.Settle();
  return CUDA_SUCCESS;
}

void Session::AnswerSwapOutRequest() {
  backend::SessionResidency* residency = memory_quota_.residency();
  if (residency == nullptr) return;
  const uint64_t request = residency->swap_out_request.load(std::memory_order_acquire);
  if (request == residency->swap_out_answer.load(std::memory_order_relaxed)) return;
  const uint64_t offset = residency->store_offset.load();
  const uint64_t bytes = residency->store_bytes.load();
  if (swappable_.swapped_out() || swappable_.empty()) {
    residency->swap_out_answer.store(request, std::memory_order_release);
    return;
  }
  const int64_t start = MonotonicNs();
  int64_t locking = 0;  // page-locking what of the extent was not locked ahead: a one-off, kept out of the rate
  residency->residency.store(2);
  CUresult result = Quiesce();
  uint8_t* store = nullptr;
  if (result == CUDA_SUCCESS && (swap_space_.At(offset, bytes) == nullptr || bytes < swappable_.movable_bytes())) {
    result = CUDA_ERROR_INVALID_VALUE;  // it grew since the backend chose the extent: asked again at the next look
  }
  if (result == CUDA_SUCCESS) {
    if (CurrentDriverContext() == nullptr && !contexts_.empty()) driver_.cuCtxSetCurrent(contexts_.begin()->second);
    const int64_t lock_start = MonotonicNs();
    store = swap_space_.Prepare(offset, bytes);  // what is not page-locked ahead yet, while nothing of it runs
    locking = MonotonicNs() - lock_start;
    result = swappable_.SwapOut(store, bytes, SwapSpace::kLockPieceBytes);
    RestoreCurrentContext();
  }
  if (result == CUDA_SUCCESS) {
    const int64_t elapsed = MonotonicNs() - start - locking;
    residency->store_offset.store(offset);
    residency->swap_outs.fetch_add(1);
    residency->swap_out_ns.fetch_add(static_cast<uint64_t>(elapsed));
    residency->swap_out_bytes.fetch_add(swappable_.movable_bytes());
    residency->residency.store(1);
    spdlog::info("swapped out {} MiB in {:.3f} s (and {:.3f} s page-locking the swap space)",
                 swappable_.movable_bytes() >> 20, elapsed / 1e9, locking / 1e9);
  } else {
    residency->residency.store(0);
    if (result != CUDA_ERROR_NOT_READY && result != CUDA_ERROR_INVALID_VALUE) {
      // A context that cannot synchronize holds a fault: it never swaps again.
      residency->unswappable.store(static_cast<uint32_t>(backend::SwapRefusal::kFaulted));
    }
    spdlog::debug("swap-out request declined (CUresult {})", static_cast<int>(result));
  }
  residency->swap_out_answer.store(request, std::memory_order_release);
}

}  // namespace curelay::executor
