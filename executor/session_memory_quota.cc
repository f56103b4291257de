#include "executor/session_memory_quota.h"

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
