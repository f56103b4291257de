// The "GPU" of one emulated device: a thread that executes queued work
// (kernels, async copies and memsets, event records, cross-device waits)
// strictly in submission order. Because every stream of every context on a
// device feeds this one queue, stream order, legacy-stream implicit
// synchronization and "one kernel at a time" all hold by construction;
// per-stream and per-context sequence numbers give precise query/sync
// answers on top of it.
#ifndef CURELAY_TESTS_EMULATED_DRIVER_DEVICE_WORKER_H_
#define CURELAY_TESTS_EMULATED_DRIVER_DEVICE_WORKER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <thread>

namespace curelay::emulated {

class DeviceWorker {
 public:
  explicit DeviceWorker(int device);
  ~DeviceWorker();
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  // Queues `task` and returns its sequence number (> 0). Each counter in
  // `trackers` (e.g. the stream's and the context's "last submitted") is
  // raised to that number before any other submission can be ordered after
  // it, so a sync that starts after Submit() returns always covers the task.
  uint64_t Submit(std::function<void()> task,
                  std::initializer_list<std::atomic<uint64_t>*> trackers = {});

  // Blocks until every task up to and including `seq` has finished.
  void Wait(uint64_t seq);
  // Wait with a deadline: false when `seq` is still not done by then.
  bool WaitUntil(uint64_t seq, std::chrono::steady_clock::time_point deadline);
  bool Done(uint64_t seq) const;
  // Sequence number of the newest submitted task (0 if none).
  uint64_t last_submitted() const;

  int device() const { return device_; }

 private:
  void Loop();

  const int device_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t submitted_ = 0;
  // Written under mu_, but readable without it so that waiters and the idle
  // worker can spin briefly before sleeping: a condition-variable handoff
  // costs tens of microseconds, which would dominate synchronous calls.
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> queued_{0};
  bool stopping_ = false;
  std::thread thread_;
};

// Raises `counter` to at least `value`.
void AtomicMax(std::atomic<uint64_t>& counter, uint64_t value);

}  // namespace curelay::emulated

#endif  // CURELAY_TESTS_EMULATED_DRIVER_DEVICE_WORKER_H_
