// The changed runs of a mirrored host buffer (see MirrorUpdate in curelay.fbs), found against a shadow copy of what
// both sides last agreed on, and applied on the other side after checking every run. Shared by the shim and the
// executor so that both ends encode and verify updates the same way.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "schema/wire.h"

namespace curelay::wire {

// Appends the runs of bytes where `current` differs from `shadow` (exact bytes: a byte the other side may have
// written meanwhile is never sent back unchanged), their bytes to `data`, and brings `shadow` up to date. Pages that
// are equal cost one memcmp each.
inline void CollectMirrorRuns(uint64_t mirror, const uint8_t* current, uint8_t* shadow, uint64_t bytes,
                              std::vector<MirrorRange>& runs, std::vector<uint8_t>& data) {
  constexpr uint64_t kBlock = 4096;
  for (uint64_t block = 0; block < bytes; block += kBlock) {
    const uint64_t length = std::min(kBlock, bytes - block);
    if (std::memcmp(current + block, shadow + block, length) == 0) continue;
    uint64_t i = block;
    const uint64_t end = block + length;
    while (i < end) {
      while (i < end && current[i] == shadow[i]) ++i;
      if (i == end) break;
      const uint64_t start = i;
      while (i < end && current[i] != shadow[i]) ++i;
      // A run that continues from the previous block's last run is extended instead of split.
      if (!runs.empty() && runs.back().mirror() == mirror &&
          runs.back().offset() + runs.back().bytes() == start) {
        runs.back() = MirrorRange(mirror, runs.back().offset(), runs.back().bytes() + (i - start));
      } else {
        runs.emplace_back(mirror, start, i - start);
      }
      data.insert(data.end(), current + start, current + i);
      std::memcpy(shadow + start, current + start, i - start);
    }
  }
}

// Sends `runs` (their bytes concatenated in `data`) as MirrorUpdate messages of at most kMaxMirrorRanges runs
// each: `send(ranges, payload)` builds and sends one (a Request from the shim, a Reply from the executor) and
// answers false if the channel failed, which stops the batching.
inline bool SendMirrorRunsInBatches(
    const std::vector<MirrorRange>& runs, const std::vector<uint8_t>& data,
    const std::function<bool(std::span<const MirrorRange> ranges, std::span<const uint8_t> payload)>& send) {
  size_t first_run = 0, first_byte = 0;
  while (first_run < runs.size()) {
    const size_t count = std::min(kMaxMirrorRanges, runs.size() - first_run);
    uint64_t bytes = 0;
    for (size_t i = first_run; i < first_run + count; ++i) bytes += runs[i].bytes();
    if (!send({runs.data() + first_run, count}, {data.data() + first_byte, bytes})) return false;
    first_run += count;
    first_byte += bytes;
  }
  return true;
}

// A mirror as the receiving side knows it: where its bytes and its shadow live.
struct MirrorTarget {
  uint8_t* memory = nullptr;
  uint8_t* shadow = nullptr;
  uint64_t bytes = 0;
};

// How a run's bytes reach a mirror's memory (the shadow always takes them as they are).
using MirrorMemoryWriter = std::function<void(uint8_t* memory, const uint8_t* bytes, uint64_t count)>;

// Checks every run of `update` against the mirrors `find` knows and against the payload's size, then writes them
// into each mirror's memory (with `write_memory` if given, else as they are) and shadow. Nothing is written unless
// the whole update is valid.
inline bool ApplyMirrorRuns(const MirrorUpdate& update, std::span<const uint8_t> payload,
                            const std::function<MirrorTarget(uint64_t mirror)>& find,
                            const MirrorMemoryWriter& write_memory = {}) {
  if (update.ranges() == nullptr || update.ranges()->size() > kMaxMirrorRanges) return false;
  uint64_t total = 0;
  const auto& ranges = *update.ranges();
  for (flatbuffers::uoffset_t i = 0; i < ranges.size(); ++i) {
    const MirrorRange run = StructAt(ranges, i);
    const MirrorTarget target = find(run.mirror());
    if (target.memory == nullptr || run.offset() > target.bytes || run.bytes() > target.bytes - run.offset()) {
      return false;
    }
    total += run.bytes();
    if (total > payload.size()) return false;
  }
  if (total != payload.size()) return false;
  uint64_t at = 0;
  for (flatbuffers::uoffset_t i = 0; i < ranges.size(); ++i) {
    const MirrorRange run = StructAt(ranges, i);
    const MirrorTarget target = find(run.mirror());
    if (write_memory) {
      write_memory(target.memory + run.offset(), payload.data() + at, run.bytes());
    } else {
      std::memcpy(target.memory + run.offset(), payload.data() + at, run.bytes());
    }
    std::memcpy(target.shadow + run.offset(), payload.data() + at, run.bytes());
    at += run.bytes();
  }
  return true;
}

}  // namespace curelay::wire
