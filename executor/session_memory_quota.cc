#include "executor/session_memory_quota.h"

#include <cstring>

#include "common/gpu_list.h"

namespace curelay::executor {

bool SessionMemoryQuota::Attach(const std::string& board_path, int session_slot, std::string* error) {
  if (board_path.empty() || session_slot < 0) return true;
  if (session_slot >= backend::kMaxQuotaSessions) {
    *error = "quota session slot out of range";
    return false;
  }
  board_.reset(backend::MemoryQuotaBoard::Open(board_path, error));
  slot_ = session_slot;
  return board_ != nullptr;
}

std::vector<SessionMemoryQuota::SiblingSession> SessionMemoryQuota::SiblingSessions() const {
  std::vector<SiblingSession> siblings;
  if (board_ == nullptr) return siblings;
  const int32_t tenant_slot = board_->session(slot_).tenant.load();
  if (tenant_slot < 0) return siblings;
  for (int slot = 0; slot < backend::kMaxQuotaSessions; ++slot) {
    const backend::SessionMemoryAccount& account = board_->session(slot);
    const int32_t executor_pid = account.executor_pid.load();
    if (slot == slot_ || executor_pid <= 0 || account.tenant.load() != tenant_slot) continue;
    // The backend writes the name before the pid; a slot reused meanwhile may tear it, never overrun it.
    char program[backend::kClientProgramBytes + 1];
    std::memcpy(program, account.client_program, sizeof program);
    program[backend::kClientProgramBytes] = '\0';
    siblings.push_back({executor_pid, account.client_pid.load(), program});
  }
  return siblings;
}

uint32_t SessionMemoryQuota::waiting_on_gpu(int gpu) const {
  if (board_ == nullptr || gpu < 0 || gpu >= kMaxHostGpus) return 0;
  return board_->waiting_on_gpu(gpu).load();
}

const backend::TenantMemoryAccount* SessionMemoryQuota::tenant() const {
  if (board_ == nullptr) return nullptr;
  const int tenant = board_->session(slot_).tenant.load();
  return tenant >= 0 && tenant < backend::kMaxQuotaTenants ? &board_->tenant(tenant) : nullptr;
}

}  // namespace curelay::executor
