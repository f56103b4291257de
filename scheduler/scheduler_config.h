// Scheduler-wide knobs, fixed for the scheduler's lifetime (tenant limits are the live-changeable part).
#pragma once

#include <chrono>
#include <cstddef>

#include "scheduler/clock.h"

namespace curelay::scheduler {

struct SchedulerConfig {
  // Wall time a tenant holds a GPU before the turn passes to another tenant of its class that has work.
  Duration slice = std::chrono::milliseconds(10);
  // How long a slice holder whose work is all done keeps its turn, waiting for its next work, while it is still
  // the least served tenant of its class (per unit of weight). Programs pause between batches (a synchronize, a
  // host step); passing the turn at every pause would share the GPU by turns taken, not by weight.
  Duration anticipation = std::chrono::milliseconds(1);
  // Estimated GPU time a session may have in flight while a session of a higher class is open on its GPU. It
  // bounds how long that higher session's first work waits behind lower-class work already queued on the GPU.
  Duration low_priority_inflight_budget = std::chrono::milliseconds(2);
  // Share of the time a higher class has work in flight (none waiting) that the next class down may use beside
  // it (a launch-bound high-priority program keeps work in flight most of the time while its GPU is mostly idle).
  // The GPU time-slices processes, so lower-class work started then delays the higher class's next kernel. Each
  // such piece is charged its measured GPU time against credit earned at this rate while the higher class is
  // active (at most one in-flight budget ahead; a debt, at most 1 s, outlives the higher class's idle gaps).
  // Context switches are not charged, so the higher class loses more than this share (docs/scheduling.md has the
  // measurements). 0: strict, lower classes start nothing while a higher class has work pending or in flight.
  double lower_class_share = 0;
  // Under strict precedence (lower_class_share 0), how long every higher class must have had nothing in flight on
  // the GPU before a lower class that yields to it starts work there (anticipation, as disk schedulers wait for a
  // process's next request). A request-by-request service leaves gaps of tens of microseconds between requests:
  // a lower kernel started in one runs into the next request, which on a GPU that time-slices processes waits for
  // it and for the switch back. Gaps longer than this are the lower classes' to use. Zero: no wait.
  Duration higher_class_quiet = std::chrono::microseconds(500);
  // Work conservation: while the estimated GPU time in flight on a GPU, over all its sessions, stays below this,
  // every session of the top active class may start work at once, turns or not (a launch-bound tenant leaves the
  // GPU mostly idle; making it wait for another's turn only loses throughput). Reaching it saturates the GPU:
  // turns, weights and slices apply. Zero: the GPU always counts as saturated (pure turns).
  Duration saturation_inflight{0};
  // Once saturated, the GPU counts as saturated until its in-flight estimate has stayed below this for the
  // anticipation window (hysteresis: a saturating tenant's short gaps between batches do not end it). At most
  // saturation_inflight.
  Duration desaturation_inflight{0};
  // Saturation also needs a busy GPU: the GPU time of the work that completed on it in the last busy_window, over
  // that window, at least this fraction. A launch-bound tenant queues a step's kernels in a burst (past the
  // in-flight mark for a moment) on a GPU that is idle most of the time, and turns would only make its neighbour
  // wait (measured: 1.35-1.48x for a batch-1 inference beside a conv net training step). Zero: the in-flight mark
  // alone decides.
  double saturation_busy_fraction = 0;
  Duration busy_window = std::chrono::milliseconds(20);
  // Estimate for a kernel key never seen to complete.
  Duration default_kernel_estimate = std::chrono::microseconds(500);
  // Weight of a new observation in a kernel's moving-average estimate, in (0, 1].
  double estimate_smoothing = 0.25;
  // Queue-wait samples kept per tenant for percentiles (the most recent ones).
  size_t queue_wait_samples = 4096;
};

}  // namespace curelay::scheduler
