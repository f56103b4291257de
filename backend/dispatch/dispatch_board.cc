#include "backend/dispatch/dispatch_board.h"

#include <sys/mman.h>

#include "transport/shm/shared_file.h"

namespace curelay::backend {
namespace {

constexpr uint64_t kMagic = 0x3464707379616c65;  // "elaysdp4": the classes' drain instants added

}  // namespace

uint64_t DispatchBoard::Layout() { return kMagic; }

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
    grant.work_class.store(kDispatchClasses - 1);
    grant.yields_to_higher_work.store(0);
    grant.higher_quiet_ns.store(0);
    grant.marks_work.store(0);
  }
  s.tail.store(s.head.load());
  ClearWorkMarks(index);
}

void DispatchBoard::ClearWorkMarks(int index) {
  const uint64_t keep = ~(uint64_t{1} << (index % 64));
  for (GpuWorkMarks& gpu : layout_->work_marks) {
    for (auto& words : gpu.words) words[index / 64].fetch_and(keep, std::memory_order_acq_rel);
  }
}

void DispatchBoard::MarkWork(int index, int gpu, uint32_t work_class, bool has_work) {
  if (gpu < 0 || gpu >= kMaxDispatchGpus || work_class >= kDispatchClasses) return;
  std::atomic<uint64_t>& word = layout_->work_marks[gpu].words[work_class][index / 64];
  const uint64_t bit = uint64_t{1} << (index % 64);
  if (has_work) {
    word.fetch_or(bit, std::memory_order_acq_rel);
  } else {
    word.fetch_and(~bit, std::memory_order_acq_rel);
  }
}

bool DispatchBoard::WorkMarked(int index, int gpu, uint32_t work_class) const {
  if (gpu < 0 || gpu >= kMaxDispatchGpus || work_class >= kDispatchClasses) return false;
  const uint64_t word = layout_->work_marks[gpu].words[work_class][index / 64].load(std::memory_order_acquire);
  return (word >> (index % 64) & 1) != 0;
}

bool DispatchBoard::HigherClassHasWork(int gpu, uint32_t work_class) const {
  if (gpu < 0 || gpu >= kMaxDispatchGpus) return false;
  for (uint32_t higher = 0; higher < work_class && higher < kDispatchClasses; ++higher) {
    for (const auto& word : layout_->work_marks[gpu].words[higher]) {
      if (word.load(std::memory_order_acquire) != 0) return true;
    }
  }
  return false;
}

void DispatchBoard::NoteDrained(int gpu, uint32_t work_class, int64_t now_ns) {
  if (gpu < 0 || gpu >= kMaxDispatchGpus || work_class >= kDispatchClasses) return;
  // The last writer wins: two sessions of a class draining at once differ by microseconds, and an instant a broken
  // executor wrote (far in the future, say) lasts only until the next drain.
  layout_->work_marks[gpu].drained_ns[work_class].store(now_ns, std::memory_order_release);
}

bool DispatchBoard::HigherClassDrainedWithin(int gpu, uint32_t work_class, int64_t now_ns, int64_t quiet_ns) const {
  if (gpu < 0 || gpu >= kMaxDispatchGpus || quiet_ns <= 0) return false;
  for (uint32_t higher = 0; higher < work_class && higher < kDispatchClasses; ++higher) {
    const int64_t drained = layout_->work_marks[gpu].drained_ns[higher].load(std::memory_order_acquire);
    if (drained <= now_ns && drained > now_ns - quiet_ns) return true;  // no subtraction of a hostile value
  }
  return false;
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
