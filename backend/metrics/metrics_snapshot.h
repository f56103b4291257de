// What the backend exports to Prometheus at one instant: plain values, copied out of the scheduler and the quota
// board by whoever builds the snapshot, so rendering needs no locks and tests can write snapshots by hand.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace curelay::backend {

// Upper bounds, in seconds, of the queue-wait histogram's finite buckets; a last, implicit bucket is +Inf. Fixed,
// so every scrape and every backend exports the same series and rate()s over buckets stay comparable. They span
// an uncontended launch (~100 us) to a tenant starved for a whole second.
inline constexpr std::array<double, 9> kQueueWaitBucketBounds = {0.0001, 0.0005, 0.001, 0.005, 0.01,
                                                                 0.05,   0.1,    0.5,   1};
inline constexpr size_t kQueueWaitBucketCount = kQueueWaitBucketBounds.size() + 1;  // with +Inf

// A Prometheus-style histogram of how long a tenant's work waited for the GPU.
struct QueueWaitHistogram {
  // Cumulative, as exported: bucket_counts[i] counts samples <= kQueueWaitBucketBounds[i]; the last entry is the
  // +Inf bucket and always equals `count`.
  std::array<uint64_t, kQueueWaitBucketCount> bucket_counts{};
  double sum_seconds = 0;
  uint64_t count = 0;

  // Records one wait. Negative or NaN waits (a clock stepped backwards) count as 0, so one bad sample cannot
  // poison the sum for the rest of the process's life.
  void Observe(double seconds) {
    if (!(seconds >= 0)) seconds = 0;
    for (size_t i = 0; i < kQueueWaitBucketBounds.size(); ++i) {
      if (seconds <= kQueueWaitBucketBounds[i]) ++bucket_counts[i];
    }
    ++bucket_counts[kQueueWaitBucketCount - 1];
    sum_seconds += seconds;
    ++count;
  }
};

struct TenantMetrics {
  std::string name;
  std::string priority;            // as the registry spells it: high | normal | low
  uint32_t weight = 1;
  double gpu_seconds = 0;          // cumulative GPU time charged to the tenant
  double active_seconds = 0;       // cumulative time with work pending or in flight on a GPU, summed over GPUs
  uint64_t memory_bytes = 0;       // device memory in use now
  uint64_t memory_peak_bytes = 0;
  uint64_t quota_bytes = 0;        // 0: no quota
  uint64_t kernels = 0;            // cumulative kernel launches
  uint64_t sessions = 0;           // open now
  uint64_t swapped_sessions = 0;   // memory turns: its sessions swapped out now
  uint64_t swap_outs = 0;          // cumulative
  uint64_t swap_ins = 0;
  double swap_seconds = 0;         // cumulative time its sessions spent swapping
  QueueWaitHistogram queue_wait;
};

struct GpuMetrics {
  int index = 0;
  double utilization = 0;   // 0..1: share of the last second covered by completed scheduled work (overlaps once)
  double busy_seconds = 0;  // cumulative GPU time of completed scheduled work, summed over pieces
  // Cumulative time the scheduler found the GPU saturated (turns applied), and how many times it became so.
  double saturated_seconds = 0;
  uint64_t saturations = 0;
};

struct MetricsSnapshot {
  std::vector<TenantMetrics> tenants;  // exported in this order
  std::vector<GpuMetrics> gpus;        // exported in this order
};

}  // namespace curelay::backend
