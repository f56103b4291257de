// The scheduler's grants and the executors' work reports, in memory shared by the backend and every executor.
// Each tenant session has a slot holding one grant per host GPU: the backend writes the session's grant on each GPU
// (may it dispatch, how much estimated GPU time it may have in flight), which the executor reads before every
// launch with plain atomic loads; the executor appends what it did on which GPU (work waiting, dispatched,
// completed with its GPU time) to a single-producer ring that the backend's scheduler thread drains. Nothing on the
// launch path waits for the backend unless the grant says so.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>

#include "common/gpu_list.h"

namespace curelay::backend {

inline constexpr int kMaxDispatchSessions = 1024;
inline constexpr int kMaxDispatchGpus = kMaxHostGpus;
inline constexpr uint32_t kDispatchRingEvents = 512;

enum class DispatchEventKind : uint32_t { kArrived = 1, kDispatched = 2, kCompleted = 3 };

struct DispatchEvent {
  DispatchEventKind kind;
  uint32_t gpu;      // host GPU index
  uint64_t kernel;   // the kernel's key (unique within the session's GPU)
  int64_t gpu_ns;    // kCompleted: the GPU time the kernel took; kDispatched: the executor's estimate of it
};

struct GpuGrant {
  std::atomic<uint32_t> may_dispatch{1};
  std::atomic<int64_t> inflight_budget_ns{std::numeric_limits<int64_t>::max()};
};

struct alignas(64) SessionDispatchSlot {
  // Backend -> executor, by host GPU index.
  GpuGrant grants[kMaxDispatchGpus];
  // Executor -> backend: events [tail, head) are unread; the executor writes head, the backend tail.
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) std::atomic<uint64_t> tail{0};
  DispatchEvent events[kDispatchRingEvents];
};

struct DispatchBoardLayout {
  uint64_t magic;
  SessionDispatchSlot sessions[kMaxDispatchSessions];
};

class DispatchBoard {
 public:
  static DispatchBoard* Create(const std::string& path, std::string* error);
  static DispatchBoard* Open(const std::string& path, std::string* error);
  // The board a previous backend left at `path` (adopted sessions' executors still map it), or a new one.
  static DispatchBoard* OpenOrCreate(const std::string& path, std::string* error);
  ~DispatchBoard();

  SessionDispatchSlot& slot(int index) { return layout_->sessions[index]; }
  const std::string& path() const { return path_; }
  // Resets a slot for a new session: may dispatch on every GPU, no budget, empty ring.
  void Reset(int index);

  // Executor side: appends an event; false if the ring is full (the caller retries after the backend drains).
  static bool Push(SessionDispatchSlot& slot, const DispatchEvent& event);
  // Backend side: takes the oldest unread event; false if none.
  static bool Pop(SessionDispatchSlot& slot, DispatchEvent* event);

 private:
  DispatchBoard(DispatchBoardLayout* layout, std::string path) : layout_(layout), path_(std::move(path)) {}
  DispatchBoardLayout* layout_;
  std::string path_;
};

}  // namespace curelay::backend
