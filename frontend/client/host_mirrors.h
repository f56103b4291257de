// Page-locked host memory of a client that shares no memory with its executor (tcp://): the application's pages
// here, a page-locked mirror on the executor at the device address the application gets. A mirror takes part in
// coherence once it is active: once a kernel argument points into it (or it is small and asked for DEVICEMAP).
// Before work that may reach mapped memory the client sends what changed here since the last exchange; before
// answering a synchronizing call the executor sends what changed there (docs/architecture.md, "Mirrors").
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "schema/wire.h"

namespace curelay::frontend {

class HostMirrors {
 public:
  // Records the mirror of the application's `memory` (`bytes`, page-aligned) at the executor's `device_ptr`.
  void Add(uint8_t* memory, uint64_t bytes, CUdeviceptr device_ptr, bool active);
  // Freeing or unregistering a mirrored range, in three steps around the executor's answer: Leave before asking
  // (its changes are no longer sent, while the executor's still land), then Remove once the executor has let go, or
  // Stay if it could not. Remove erases only a mirror that is leaving: a new one the executor placed at the same
  // address meanwhile (another thread's) is not touched.
  void Leave(CUdeviceptr device_ptr);
  void Remove(CUdeviceptr device_ptr);
  void Stay(CUdeviceptr device_ptr);
  // Activates every mirror that an 8-byte-aligned word of a kernel's packed `arguments` points into.
  void ActivateReferenced(std::span<const uint8_t> arguments);
  bool any_active() const { return active_count_.load(std::memory_order_acquire) != 0; }
  // Whether any active mirror's application memory overlaps [start, start + bytes).
  bool OverlapsActive(const void* start, size_t bytes);
  // A reply's payload that a channel may write in place (a lane thread, before its reply is read) into
  // [start, start + bytes), under request `sequence`. An update read before that reply is older than the payload:
  // where a landing overlaps it, it refreshes the shadow but leaves the bytes (which then go back to the executor
  // as this side's change). Recorded only if a mirror overlaps. EndLanding once the reply has been read, with where
  // its payload is (`landed_at`): if not at `start`, the bytes the updates left are written after all.
  void BeginLanding(uint64_t sequence, uint8_t* start, size_t bytes);
  void EndLanding(uint64_t sequence, const uint8_t* landed_at);
  // Every landing ends unplaced (the session broke).
  void EndAllLandings();
  bool any_landing() const { return landing_count_.load(std::memory_order_acquire) != 0; }
  // What changed in the active mirrors since the last exchange (a newly active mirror is announced by an empty run).
  void Collect(std::vector<wire::MirrorRange>& runs, std::vector<uint8_t>& data);
  // Writes what the executor sent; false (and nothing written) if any run is outside a known mirror.
  bool Apply(const wire::MirrorUpdate& update, std::span<const uint8_t> payload);

 private:
  struct Mirror {
    uint8_t* memory = nullptr;
    uint64_t bytes = 0;
    std::unique_ptr<uint8_t[]> shadow;  // what both sides last agreed on; allocated when the mirror turns active
    bool announced = false;
    bool leaving = false;
  };
  struct SkippedRun {
    uint8_t* at = nullptr;
    std::vector<uint8_t> bytes;
  };
  struct Landing {
    uint8_t* start = nullptr;
    uint8_t* end = nullptr;
    std::vector<SkippedRun> skipped;  // what updates would have written there, in their order
  };
  void ActivateLocked(Mirror& mirror);
  // Whether any (active) mirror's application memory overlaps [begin, begin + bytes).
  bool OverlapsLocked(const uint8_t* begin, size_t bytes, bool active_only) const;
  // Writes `count` bytes at `memory` except where a landing is, and gives each landing what it kept out.
  void WriteAroundLandings(uint8_t* memory, const uint8_t* bytes, uint64_t count);

  std::mutex mutex_;
  std::map<CUdeviceptr, Mirror> mirrors_;  // by device address
  std::atomic<uint64_t> low_{~uint64_t{0}}, high_{0};  // device addresses spanned, to skip scans cheaply
  std::atomic<size_t> active_count_{0};
  std::map<uint64_t, Landing> landings_;  // by request sequence
  std::atomic<size_t> landing_count_{0};
};

}  // namespace curelay::frontend
