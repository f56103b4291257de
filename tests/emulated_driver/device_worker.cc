#include "device_worker.h"

#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

namespace curelay::emulated {
namespace {

// How long a waiter or the idle worker polls before blocking.
constexpr auto kSpinTime = std::chrono::microseconds(50);

template <typename Done>
bool SpinUntil(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

void AtomicMax(std::atomic<uint64_t>& counter, uint64_t value) {
  uint64_t current = counter.load(std::memory_order_relaxed);
  while (current < value &&
         !counter.compare_exchange_weak(current, value, std::memory_order_acq_rel)) {
  }
}

DeviceWorker::DeviceWorker(int device) : device_(device) {
  thread_ = std::thread([this] { Loop(); });
  // A readable thread name helps when debugging the executor under gdb.
  const std::string name = "emu-gpu" + std::to_string(device);
  pthread_setname_np(thread_.native_handle(), name.c_str());
}

DeviceWorker::~DeviceWorker() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t DeviceWorker::Submit(std::function<void()> task,
                              std::initializer_list<std::atomic<uint64_t>*> trackers) {
  uint64_t seq;
  {
    std::lock_guard lock(mu_);
    seq = ++submitted_;
    queue_.push_back(std::move(task));
    queued_.store(seq, std::memory_order_release);
    for (std::atomic<uint64_t>* tracker : trackers) {
      if (tracker != nullptr) AtomicMax(*tracker, seq);
    }
  }
  work_cv_.notify_one();
  return seq;
}

void DeviceWorker::Wait(uint64_t seq) {
  if (SpinUntil([&] { return Done(seq); })) return;
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return Done(seq); });
}

bool DeviceWorker::WaitUntil(uint64_t seq, std::chrono::steady_clock::time_point deadline) {
  if (SpinUntil([&] { return Done(seq); })) return true;
  std::unique_lock lock(mu_);
  return done_cv_.wait_until(lock, deadline, [&] { return Done(seq); });
}

bool DeviceWorker::Done(uint64_t seq) const {
  return completed_.load(std::memory_order_acquire) >= seq;
}

uint64_t DeviceWorker::last_submitted() const {
  std::lock_guard lock(mu_);
  return submitted_;
}

void DeviceWorker::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (queue_.empty() && !stopping_) {
      // Poll briefly for the next submission before going to sleep.
      lock.unlock();
      const uint64_t seen = completed_.load(std::memory_order_relaxed);
      SpinUntil([&] { return queued_.load(std::memory_order_acquire) > seen; });
      lock.lock();
    }
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (...) {
      // Tasks report device faults through their context; an exception here
      // is an emulator bug, which must not take the whole process down.
      std::fprintf(stderr, "curelay emulated driver: exception in device %d worker\n", device_);
    }
    task = nullptr;  // release captured buffers before reporting completion
    lock.lock();
    completed_.fetch_add(1, std::memory_order_release);
    done_cv_.notify_all();
  }
}

}  // namespace curelay::emulated
