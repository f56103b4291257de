// The scheduler's grants and the executors' work reports, in memory shared by the backend and every executor.
// Each tenant session has a slot holding one grant per host GPU: the backend writes the session's grant on each GPU
// (may it dispatch, how much estimated GPU time it may have in flight), which the executor reads before every
// launch with plain atomic loads; the executor appends what it did on which GPU (work waiting, dispatched,
// completed with its GPU time) to a single-producer ring that the backend's scheduler thread drains. Nothing on the
// launch path waits for the backend unless the grant says so.
// Each executor also marks, per GPU, whether its session has work in flight there, under its priority class: a
// lower-class session told to yield to higher work (strict precedence) holds its launches while any higher class's
// mark is set, without waiting for the backend's next pass (up to ~100 us) to hear that the higher work arrived.
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
// Priority classes as the scheduler numbers them (scheduler/priority_class.h: 0 is the highest).
inline constexpr uint32_t kDispatchClasses = 3;
inline constexpr int kWorkMarkWords = kMaxDispatchSessions / 64;

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
  // The session's priority class (whose marks its work sets), and whether its launches wait while a higher class
  // has work marked on this GPU (1) or only for the grant (0).
  std::atomic<uint32_t> work_class{kDispatchClasses - 1};
  std::atomic<uint32_t> yields_to_higher_work{0};
  // A session that yields also waits until the higher classes' marks on this GPU have been clear this long.
  std::atomic<int64_t> higher_quiet_ns{0};
  // Whether the executor marks its work (1 while a lower class that yields to it has a session open there).
  std::atomic<uint32_t> marks_work{0};
};

// Per GPU and class, one bit per slot: that session has work in flight there. Bits are set and cleared with one
// atomic operation each, so a killed executor leaves no count behind: its bits go when the backend closes or reuses
// its slot.
struct GpuWorkMarks {
  std::atomic<uint64_t> words[kDispatchClasses][kWorkMarkWords];
  // Per class, when a session of it last cleared its mark here (steady clock, ns; the host's CLOCK_MONOTONIC is
  // every process's): the start of the class's quiet time.
  std::atomic<int64_t> drained_ns[kDispatchClasses];
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
  GpuWorkMarks work_marks[kMaxDispatchGpus];
};

class DispatchBoard {
 public:
  static DispatchBoard* Create(const std::string& path, std::string* error);
  static DispatchBoard* Open(const std::string& path, std::string* error);
  // The board a previous backend left at `path` (adopted sessions' executors still map it), or a new one.
  static DispatchBoard* OpenOrCreate(const std::string& path, std::string* error);
  // This build's layout of the board (its magic number): what a session record names (SessionRecord).
  static uint64_t Layout();
  ~DispatchBoard();

  SessionDispatchSlot& slot(int index) { return layout_->sessions[index]; }
  const std::string& path() const { return path_; }
  // Resets a slot for a new session: may dispatch on every GPU, no budget, empty ring, no work marked.
  void Reset(int index);
  // Clears every work mark of a slot (its session has ended; its executor may have been killed mid-work).
  void ClearWorkMarks(int index);

  // Executor side: marks or unmarks slot `index`'s work in flight on `gpu` under class `work_class`.
  void MarkWork(int index, int gpu, uint32_t work_class, bool has_work);
  bool WorkMarked(int index, int gpu, uint32_t work_class) const;
  // Whether any session of a class above `work_class` has work marked on `gpu`.
  bool HigherClassHasWork(int gpu, uint32_t work_class) const;
  // Executor side: a session of `work_class` drained its work on `gpu` (cleared its mark) at `now_ns`.
  void NoteDrained(int gpu, uint32_t work_class, int64_t now_ns);
  // Whether a class above `work_class` cleared a mark on `gpu` less than `quiet_ns` before `now_ns`. An instant
  // after `now_ns` (written by a broken executor) does not count: it cannot hold lower classes back.
  bool HigherClassDrainedWithin(int gpu, uint32_t work_class, int64_t now_ns, int64_t quiet_ns) const;

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
