// Tenants' GPU memory accounts in memory shared by the backend and every executor, so an allocation is checked
// against its tenant's quota, across all the tenant's sessions, with one atomic operation and no round trip.
// The backend owns the board: it assigns a tenant's account and each session's account, writes quotas (live
// changes take effect at the next allocation), and settles a session's account when its executor ends, so a
// crashed executor leaves nothing counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/gpu_list.h"

namespace curelay::backend {

inline constexpr int kMaxQuotaTenants = 256;
inline constexpr int kMaxQuotaSessions = 1024;

inline constexpr size_t kMaxTenantNameBytes = 64;  // backend/tenants/tenant_record.cc's limit

struct alignas(64) TenantMemoryAccount {
  std::atomic<uint64_t> used{0};
  std::atomic<uint64_t> peak{0};           // since the backend started
  std::atomic<uint64_t> interval_peak{0};  // since the usage ledger's last interval (the backend resets it)
  std::atomic<uint64_t> quota{0};            // 0: no quota
  // Policy when the GPU itself is short: 0 fail, 1 wait, 2 swap (take turns: kMemoryPolicySwap).
  std::atomic<uint32_t> wait_when_short{0};
  std::atomic<uint32_t> wait_timeout_ms{0};
  // The tenant the account belongs to, NUL-terminated; empty: slot unused. Written by the backend only, read back
  // by the next backend after a restart (executors never read it).
  char name[kMaxTenantNameBytes + 1] = {};
  // GPU time of the usage ledger's current interval not yet written to it, kept current by the backend about every
  // second, so a backend that crashes loses at most that second of billing: the next one writes the rest.
  std::atomic<uint64_t> unrecorded_gpu_ns{0};
};

inline constexpr uint32_t kMemoryPolicySwap = 2;
// The swap space is handed out, and page-locked by executors, in blocks of this size (aligned to its start): a
// block locked once serves every later extent that covers it.
inline constexpr uint64_t kSwapSpaceBlockBytes = uint64_t{256} << 20;

// Why an executor cannot swap its session out (SessionMemoryAccount::unswappable).
enum class SwapRefusal : uint32_t {
  kNone = 0,
  kIpcExported = 1,      // another process maps memory this session exported with cuIpcGetMemHandle
  kSeveralGpus = 2,      // its movable memory is on more than one GPU
  kFaulted = 3,          // its contexts hold a sticky fault
};
const char* SwapRefusalText(uint32_t refusal);

// A session's side of memory turns (docs/scheduling.md, "Memory oversubscription"): what its executor reports and
// what the backend's residency service asks of it. Executors write the first group, the backend the second; the
// backend checks everything it reads (a broken executor writes its slot at will).
struct SessionResidency {
  // Executor -> backend. Times are CLOCK_MONOTONIC nanoseconds (the backend's steady clock).
  std::atomic<uint32_t> residency{0};        // scheduler::Residency: 0 resident, 1 swapped out, 2 moving
  std::atomic<uint32_t> unswappable{0};      // SwapRefusal
  std::atomic<int32_t> gpu{0};               // host GPU index of its movable memory
  std::atomic<uint64_t> movable_bytes{0};    // what a swap-out frees (and needs of swap space)
  std::atomic<uint64_t> shortfall_bytes{0};  // non-zero while it waits for GPU memory to be freed
  std::atomic<int64_t> waiting_since_ns{0};
  std::atomic<int64_t> resident_since_ns{0};
  std::atomic<int64_t> last_active_ns{0};    // its last request
  std::atomic<uint64_t> swap_outs{0};
  std::atomic<uint64_t> swap_ins{0};
  std::atomic<uint64_t> swap_out_ns{0};      // time spent swapping out (quiescing included), in total
  std::atomic<uint64_t> swap_in_ns{0};
  std::atomic<uint64_t> swap_out_bytes{0};   // moved, in total
  std::atomic<uint64_t> swap_in_bytes{0};
  std::atomic<uint64_t> swap_out_answer{0};  // the last swap-out request answered (done or declined)
  // Backend -> executor.
  std::atomic<uint64_t> swap_out_request{0};  // raised to ask for a swap-out into [store_offset, + store_bytes)
  std::atomic<uint64_t> store_offset{0};
  std::atomic<uint64_t> store_bytes{0};
  std::atomic<uint32_t> admitted{0};          // the head of its GPU's queue: it may take memory as it frees up
  std::atomic<uint32_t> rejected{0};          // its wait can never end: fail the allocation
  // Its home in the swap space: where its swap-outs go whenever that range is free, so its executor page-locks it
  // ahead, while the session runs, instead of during a swap-out (home_bytes 0: none yet). Written bytes-last; a
  // reader that sees a torn pair only page-locks a range it may not need.
  std::atomic<uint64_t> home_offset{0};
  std::atomic<uint64_t> home_bytes{0};
};

inline constexpr size_t kClientProgramBytes = 63;

struct alignas(64) SessionMemoryAccount {
  std::atomic<uint64_t> used{0};
  std::atomic<int32_t> tenant{-1};  // the tenant account this session charges; -1: slot free
  std::atomic<int32_t> executor_pid{0};  // the executor serving it: a restarted backend keeps the slot while it lives
  // Who the session serves, as its client reported it (pid in the client's own pid namespace, program name,
  // NUL-terminated): the tenant's executors name their siblings' processes with it in NVML's process lists
  // (docs/nvml.md). Written by the backend before executor_pid; a reader tolerates a torn name.
  std::atomic<uint32_t> client_pid{0};
  char client_program[kClientProgramBytes + 1] = {};
  SessionResidency residency;
};

struct MemoryQuotaBoardLayout {
  uint64_t magic;
  // Session ids, unique across backend restarts on this runtime directory (adopted sessions keep theirs).
  std::atomic<uint64_t> next_session_id{1};
  std::atomic<int64_t> usage_interval_start{0};  // the unix start of the interval unrecorded_gpu_ns belongs to
  // Memory turns: GPU memory a swapping session leaves free beside what it takes ([swap] reserve).
  std::atomic<uint64_t> gpu_reserve_bytes{0};
  // Sessions waiting for memory, by host GPU (the backend's count): while any wait, a session that would need
  // freed memory joins the queue instead of taking it.
  std::atomic<uint32_t> waiting_on_gpu[kMaxHostGpus] = {};
  TenantMemoryAccount tenants[kMaxQuotaTenants];
  SessionMemoryAccount sessions[kMaxQuotaSessions];
};

// A mapping of the board file. The backend creates it; executors open it by path.
class MemoryQuotaBoard {
 public:
  static MemoryQuotaBoard* Create(const std::string& path, std::string* error);
  static MemoryQuotaBoard* Open(const std::string& path, std::string* error);
  // The board a previous backend left at `path` (its sessions' executors still map it), or a new one when there is
  // none or it is not a board of this layout; `reopened` tells which.
  static MemoryQuotaBoard* OpenOrCreate(const std::string& path, bool* reopened, std::string* error);
  // This build's layout of the board (its magic number): what a session record names (SessionRecord).
  static uint64_t Layout();
  ~MemoryQuotaBoard();

  TenantMemoryAccount& tenant(int slot) { return layout_->tenants[slot]; }
  SessionMemoryAccount& session(int slot) { return layout_->sessions[slot]; }
  const std::string& path() const { return path_; }
  uint64_t TakeSessionId() { return layout_->next_session_id.fetch_add(1); }
  uint64_t next_session_id() const { return layout_->next_session_id.load(); }
  std::atomic<int64_t>& usage_interval_start() { return layout_->usage_interval_start; }
  std::atomic<uint64_t>& gpu_reserve_bytes() { return layout_->gpu_reserve_bytes; }
  std::atomic<uint32_t>& waiting_on_gpu(int gpu) { return layout_->waiting_on_gpu[gpu]; }

  // Charges `bytes` to the session and its tenant; false (nothing charged) when the tenant's quota would be
  // exceeded.
  bool Reserve(int session_slot, uint64_t bytes);
  void Release(int session_slot, uint64_t bytes);
  // Returns whatever the session still holds to its tenant and frees the slot (its executor is gone).
  void Settle(int session_slot);

 private:
  MemoryQuotaBoard(MemoryQuotaBoardLayout* layout, std::string path) : layout_(layout), path_(std::move(path)) {}
  MemoryQuotaBoardLayout* layout_;
  std::string path_;
};

}  // namespace curelay::backend
