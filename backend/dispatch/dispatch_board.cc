#include "backend/dispatch/dispatch_board.h"

#include <sys/mman.h>

#include "transport/shm/shared_file.h"

namespace curelay::backend {
namespace {

constexpr uint64_t kMagic = 0x3264707379616c65;  // "elaysdp2"

}  // namespace

DispatchBoard* DispatchBoard::Create(const std::string& path, std::string* error) {
  void* mapping = transport::CreateNamedSharedFile(path, sizeof(DispatchBoardLayout), error);
  if (mapping == nullptr) return nullptr;
  auto* layout = static_cast<DispatchBoardLayout*>(mapping);
  layout->magic = kMagic;
  auto* board = new DispatchBoard(layout, path);
  for (int i = 0; i < kMaxDispatchSessions; ++i) board->Reset(i);
  return board;
}

DispatchBoard* DispatchBoard::Open(const std::string& path, std::string* error) {
  auto* layout =
      static_cast<DispatchBoardLayout*>(transport::OpenNamedSharedFile(path, sizeof(DispatchBoardLayout), error));
  if (layout == nullptr) return nullptr;
  if (layout->magic != kMagic) {
    munmap(layout, sizeof(DispatchBoardLayout));
    *error = path + ": not a dispatch board";
    return nullptr;
  }
  return new DispatchBoard(layout, path);
}

DispatchBoard::~DispatchBoard() { munmap(layout_, sizeof(DispatchBoardLayout)); }

DispatchBoard* DispatchBoard::OpenOrCreate(const std::string& path, std::string* error) {
  std::string ignored;
  if (DispatchBoard* board = Open(path, &ignored)) return board;
  return Create(path, error);
}

void DispatchBoard::Reset(int index) {
  SessionDispatchSlot& s = layout_->sessions[index];
  for (GpuGrant& grant : s.grants) {
    grant.may_dispatch.store(1);
    grant.inflight_budget_ns.store(std::numeric_limits<int64_t>::max());
  }
  s.tail.store(s.head.load());
}

bool DispatchBoard::Push(SessionDispatchSlot& slot, const DispatchEvent& event) {
  const uint64_t head = slot.head.load(std::memory_order_relaxed);
  if (head - slot.tail.load(std::memory_order_acquire) >= kDispatchRingEvents) return false;
  slot.events[head % kDispatchRingEvents] = event;
  slot.head.store(head + 1, std::memory_order_release);
  return true;
}

bool DispatchBoard::Pop(SessionDispatchSlot& slot, DispatchEvent* event) {
  const uint64_t tail = slot.tail.load(std::memory_order_relaxed);
  const uint64_t head = slot.head.load(std::memory_order_acquire);
  if (tail == head || head - tail > kDispatchRingEvents) return false;  // empty, or a corrupt head: ignore
  *event = slot.events[tail % kDispatchRingEvents];
  slot.tail.store(tail + 1, std::memory_order_release);
  return true;
}

}  // namespace curelay::backend
