// Memory turns, the backend's side (docs/scheduling.md, "Memory oversubscription"): a thread that looks at the
// quota board every 20 ms, where executors of tenants whose memory policy is "swap" report their movable memory,
// their residency and what they wait for; it runs scheduler::DecideTurns over them and writes its answers back:
// which session is the head of each GPU's queue (admitted to freed memory), which waits are rejected, and which
// sessions must swap out, each with an extent of the swap space. Each swapping session also gets a home in the swap
// space as soon as it has movable memory, apart from the others' while the space allows: its swap-outs go there
// whenever it is free, and its executor page-locks it ahead (page-locking 36 GiB took 13 s on a busy GPU host, which
// a swap-out, and the session waiting for it, would otherwise pay the first time). Executors do the moving (executor/
// session_residency.cc). Everything read from the board is checked: a broken executor only confuses its own turns.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "backend/quota/memory_quota_board.h"
#include "backend/residency/swap_space_file.h"
#include "scheduler/memory_turns.h"

namespace curelay::backend {

struct ResidencySettings {
  scheduler::MemoryTurnsConfig turns;
  uint64_t host_budget_bytes = 0;  // the swap space; 0: memory turns are off
  uint64_t reserve_bytes = 0;      // GPU memory a session taking memory leaves free
  bool lock_ahead = true;          // sessions get homes, page-locked ahead by their executors
};

// One session's memory turns as backendctl and the metrics show them (read from its slot of the quota board).
struct SessionSwapFigures {
  const char* residency = "resident";  // resident | swapped-out | moving | waiting
  uint64_t swap_outs = 0;
  uint64_t swap_ins = 0;
  double swap_seconds = 0;  // out and in, quiescing included
  uint64_t movable_bytes = 0;
  const char* unswappable = nullptr;  // why it is never swapped out (SwapRefusalText); null: it may be
};
SessionSwapFigures ReadSwapFigures(const SessionResidency& residency);

class ResidencyService {
 public:
  ResidencyService(MemoryQuotaBoard& board, ResidencySettings settings) : board_(board), settings_(settings) {}
  ~ResidencyService() { Stop(); }

  // Creates the swap space and starts the thread (nothing when the budget is 0). False with `error` on failure.
  bool Start(std::string* error);
  void Stop();
  bool enabled() const { return space_.size() != 0; }
  const std::string& swap_space_path() const { return space_.path(); }
  uint64_t swap_space_bytes() const { return space_.size(); }

  // A tenant's class, weight and fixed switch time (0: the backend's setting), by its quota-board slot.
  void SetTenant(int tenant_slot, scheduler::PriorityClass priority, uint32_t weight, uint32_t switch_time_ms);

  // A session adopted from a previous backend (its executor maps that backend's swap space): never swapped out.
  void MarkAdopted(int session_slot);

  struct Figures {
    uint64_t swap_space_bytes = 0;
    uint64_t swap_space_used = 0;
    uint32_t swapped_out = 0;  // sessions swapped out now
    uint32_t waiting = 0;      // sessions waiting for memory now
  };
  Figures Summary();

  // One look at the board at `now` (the thread's loop; tests call it with their own clock).
  void Step(scheduler::TimePoint now);

 private:
  struct TenantTurns {
    scheduler::PriorityClass priority = scheduler::PriorityClass::kNormal;
    uint32_t weight = 1;
    uint32_t switch_time_ms = 0;
  };
  void Loop();

  MemoryQuotaBoard& board_;
  ResidencySettings settings_;
  SwapSpaceFile space_;
  std::mutex mutex_;  // guards what follows (the thread, and the broker's SetTenant and Summary)
  std::map<int, TenantTurns> tenants_;
  // A session's home: where its swap-outs go when that range is free, page-locked ahead by its executor.
  struct Home {
    uint64_t offset = 0;
    uint64_t bytes = 0;
    bool own = false;  // taken from homes_ (apart from every other home), or shared: the space was spoken for
  };
  void PlaceHome(int slot, SessionResidency& residency, uint64_t movable_bytes);
  void DropHome(int slot);

  std::map<int, uint64_t> extents_;  // session slot -> its extent of the swap space
  std::map<int, Home> home_of_;      // session slot -> its home
  ExtentAllocator homes_{kSwapSpaceBlockBytes};
  std::map<int, bool> adopted_;  // session slot -> adopted (until its session ends)
  Figures figures_;
  bool budget_exhausted_logged_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace curelay::backend
