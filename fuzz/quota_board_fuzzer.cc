// The quota board as the backend reads it (backend/quota/memory_quota_board.cc, backend/residency/): every executor
// maps the board read-write, so a session's account and its memory-turns slot (residency, movable memory, shortfall,
// times, swap counters, answers), and even the tenants' accounts, hold whatever such a process wrote. The harness
// runs a real ResidencyService (its swap space four blocks, 1 GiB) on a real board file and plays up to eight
// executors and the backend's own actions on it. Each record of the input (fuzz_input.h) is one operation, its first
// byte choosing which:
//   0 write one memory-turns field of a session slot (slot, field, u64 value), hostile
//   1 write a session account's tenant index (i32) and bytes used (u64), hostile
//   2 the residency service looks (Step), the clock advanced by a u16 of milliseconds
//   3 the backend settles a slot (its executor died)
//   4 an honest executor charges or refunds bytes (Reserve / Release)
//   5 the figures backendctl and the metrics read (ReadSwapFigures, Summary)
//   6 an honest executor answers its outstanding swap-out request (swapped out, or declined)
//   7 write a tenant account's policy or quota (tenant, field, u64), hostile
// Invariants beyond the sanitizers: whatever the backend hands out (extents, homes) lies inside the swap space, what
// it counts as used never exceeds the space, and once every slot is settled the whole space is free again.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "backend/quota/memory_quota_board.h"
#include "backend/residency/residency_service.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/scratch_directory.h"

namespace {

using namespace curelay::backend;

constexpr int kSlots = 8;     // the session slots the input plays
constexpr int kTenants = 3;   // 0: swap, normal; 1: swap, high, with a quota; 2: wait
constexpr uint64_t kSpaceBytes = 4 * kSwapSpaceBlockBytes;

std::unique_ptr<MemoryQuotaBoard> board;
std::unique_ptr<ResidencyService> service;
std::string board_path;

[[noreturn]] void Fail(const char* what, int slot, uint64_t a, uint64_t b) {
  std::fprintf(stderr, "quota_board_fuzzer: %s (slot %d: %llu, %llu)\n", what, slot, static_cast<unsigned long long>(a),
               static_cast<unsigned long long>(b));
  std::abort();
}

template <typename T>
T Read(std::span<const uint8_t> bytes, size_t at) {
  T value{};
  if (at < bytes.size()) std::memcpy(&value, bytes.data() + at, std::min(sizeof(T), bytes.size() - at));
  return value;
}

// A value the backend wrote (it changed during a look): an extent or a home must lie inside the space.
void CheckRange(const char* what, int slot, uint64_t offset, uint64_t bytes) {
  if (offset > kSpaceBytes || bytes > kSpaceBytes - offset) Fail(what, slot, offset, bytes);
}

void Look(curelay::scheduler::TimePoint now) {
  uint64_t requests[kSlots], homes[kSlots][2];
  for (int slot = 0; slot < kSlots; ++slot) {
    const SessionResidency& residency = board->session(slot).residency;
    requests[slot] = residency.swap_out_request.load();
    homes[slot][0] = residency.home_offset.load();
    homes[slot][1] = residency.home_bytes.load();
  }
  service->Step(now);
  for (int slot = 0; slot < kSlots; ++slot) {
    const SessionResidency& residency = board->session(slot).residency;
    if (residency.swap_out_request.load() != requests[slot]) {
      CheckRange("a swap-out extent outside the swap space", slot, residency.store_offset.load(),
                 residency.store_bytes.load());
    }
    if (residency.home_offset.load() != homes[slot][0] || residency.home_bytes.load() != homes[slot][1]) {
      CheckRange("a home outside the swap space", slot, residency.home_offset.load(), residency.home_bytes.load());
    }
  }
  const ResidencyService::Figures figures = service->Summary();
  if (figures.swap_space_used > figures.swap_space_bytes) {
    Fail("more of the swap space used than it has", -1, figures.swap_space_used, figures.swap_space_bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  board_path = curelay::fuzz::MakeScratchDirectory("curelay-quota-fuzz") + "/quota";
  std::string error;
  board.reset(MemoryQuotaBoard::Create(board_path, &error));
  ResidencySettings settings;
  settings.host_budget_bytes = kSpaceBytes;
  settings.reserve_bytes = 64 << 20;
  service = std::make_unique<ResidencyService>(*board, settings);
  if (board == nullptr || !service->Start(&error)) {
    std::fprintf(stderr, "quota_board_fuzzer: %s\n", error.c_str());
    std::abort();
  }
  service->Stop();  // the harness looks itself, with its own clock
  service->SetTenant(0, curelay::scheduler::PriorityClass::kNormal, 1, 0);
  service->SetTenant(1, curelay::scheduler::PriorityClass::kHigh, 3, 500);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Every input starts from the state the backend sets up: three tenants, the played slots free.
  for (int tenant = 0; tenant < kTenants; ++tenant) {
    TenantMemoryAccount& account = board->tenant(tenant);
    account.used.store(0);
    account.quota.store(tenant == 1 ? uint64_t{512} << 20 : 0);
    account.wait_when_short.store(tenant == 2 ? 1 : kMemoryPolicySwap);
  }
  curelay::scheduler::TimePoint now{std::chrono::hours(24)};
  curelay::fuzz::RecordReader input(data, size);
  while (!input.done()) {
    const auto record = input.Next();
    if (record.size() < 2) continue;
    const int slot = record[1] % kSlots;
    SessionMemoryAccount& account = board->session(slot);
    SessionResidency& residency = account.residency;
    const auto operand = record.subspan(2);
    switch (record[0] % 8) {
      case 0: {
        const uint64_t value = Read<uint64_t>(operand, 1);
        switch (Read<uint8_t>(operand, 0) % 19) {
          case 0: residency.residency.store(static_cast<uint32_t>(value)); break;
          case 1: residency.unswappable.store(static_cast<uint32_t>(value)); break;
          case 2: residency.gpu.store(static_cast<int32_t>(value)); break;
          case 3: residency.movable_bytes.store(value); break;
          case 4: residency.shortfall_bytes.store(value); break;
          case 5: residency.waiting_since_ns.store(static_cast<int64_t>(value)); break;
          case 6: residency.resident_since_ns.store(static_cast<int64_t>(value)); break;
          case 7: residency.last_active_ns.store(static_cast<int64_t>(value)); break;
          case 8: residency.swap_out_ns.store(value); break;
          case 9: residency.swap_out_bytes.store(value); break;
          case 10: residency.swap_in_ns.store(value); break;
          case 11: residency.swap_in_bytes.store(value); break;
          case 12: residency.swap_out_answer.store(value); break;
          case 13: residency.swap_outs.store(value); break;
          // The backend's own fields are in the executor's reach too.
          case 14: residency.swap_out_request.store(value); break;
          case 15: residency.store_offset.store(value); break;
          case 16: residency.store_bytes.store(value); break;
          case 17: residency.home_offset.store(value); break;
          case 18: residency.home_bytes.store(value); break;
        }
        break;
      }
      case 1:
        account.tenant.store(Read<int32_t>(operand, 0));
        account.used.store(Read<uint64_t>(operand, 4));
        break;
      case 2:
        now += std::chrono::milliseconds(Read<uint16_t>(operand, 0));
        Look(now);
        break;
      case 3:
        board->Settle(slot);
        break;
      case 4: {
        const uint64_t bytes = Read<uint32_t>(operand, 1);
        if (Read<uint8_t>(operand, 0) % 2 == 0) {
          (void)board->Reserve(slot, bytes);
        } else {
          board->Release(slot, bytes);
        }
        break;
      }
      case 5: {
        const SessionSwapFigures figures = ReadSwapFigures(residency);
        if (figures.residency == nullptr) Fail("no residency text", slot, 0, 0);
        (void)service->Summary();
        break;
      }
      case 6: {
        const uint64_t request = residency.swap_out_request.load();
        if (request != residency.swap_out_answer.load()) {
          residency.residency.store(Read<uint8_t>(operand, 0) % 2 == 0 ? 1 : 0);
          residency.swap_out_answer.store(request);
        }
        break;
      }
      case 7: {
        TenantMemoryAccount& tenant = board->tenant(slot % kTenants);
        const uint64_t value = Read<uint64_t>(operand, 1);
        if (Read<uint8_t>(operand, 0) % 2 == 0) {
          tenant.wait_when_short.store(static_cast<uint32_t>(value));
        } else {
          tenant.quota.store(value);
        }
        break;
      }
    }
  }
  // Every executor is gone: whatever they held of the swap space comes back, all of it.
  for (int slot = 0; slot < kSlots; ++slot) board->Settle(slot);
  Look(now + std::chrono::seconds(1));
  const ResidencyService::Figures figures = service->Summary();
  if (figures.swap_space_used != 0) Fail("swap space still held after every session ended", -1, figures.swap_space_used, 0);
  return 0;
}
