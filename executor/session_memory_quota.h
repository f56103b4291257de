// This session's charges on its tenant's memory account (backend/quota/memory_quota_board.h): every allocation
// path charges before it keeps memory and refunds when the memory goes. A session without a tenant (anonymous) has
// no account, and every charge succeeds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/quota/memory_quota_board.h"

namespace curelay::executor {

class SessionMemoryQuota {
 public:
  // Opens the board the backend named for this session; false with `error` when it cannot.
  bool Attach(const std::string& board_path, int session_slot, std::string* error);

  bool Charge(uint64_t bytes) { return board_ == nullptr || board_->Reserve(slot_, bytes); }
  void Refund(uint64_t bytes) {
    if (board_ != nullptr) board_->Release(slot_, bytes);
  }
  // The tenant's limits as they are now (the backend changes them live); quota 0: none.
  uint64_t quota() const { return tenant() != nullptr ? tenant()->quota.load() : 0; }
  uint64_t tenant_used() const { return tenant() != nullptr ? tenant()->used.load() : 0; }
  bool wait_when_short() const { return tenant() != nullptr && tenant()->wait_when_short.load() != 0; }
  uint32_t wait_timeout_ms() const { return tenant() != nullptr ? tenant()->wait_timeout_ms.load() : 0; }
  // Memory turns: the tenant's policy is to take turns when the GPU is short (docs/scheduling.md).
  bool swap_policy() const {
    return tenant() != nullptr && tenant()->wait_when_short.load() == backend::kMemoryPolicySwap;
  }
  // This session's side of memory turns; null without a board.
  backend::SessionResidency* residency() { return board_ != nullptr ? &board_->session(slot_).residency : nullptr; }
  uint64_t gpu_reserve_bytes() const { return board_ != nullptr ? board_->gpu_reserve_bytes().load() : 0; }
  // How many sessions wait for memory on host GPU `gpu` (the backend's count, as of its last look).
  uint32_t waiting_on_gpu(int gpu) const;
  // The other live sessions of this session's tenant, as the board names them (none without a board): their
  // executors' pids and their clients' pids and programs, for NVML's process lists (docs/nvml.md).
  struct SiblingSession {
    int32_t executor_pid;
    uint32_t client_pid;
    std::string client_program;
  };
  std::vector<SiblingSession> SiblingSessions() const;

 private:
  const backend::TenantMemoryAccount* tenant() const;

  std::unique_ptr<backend::MemoryQuotaBoard> board_;
  int slot_ = -1;
};

}  // namespace curelay::executor
