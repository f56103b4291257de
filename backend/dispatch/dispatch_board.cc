#include "backend/dispatch/dispatch_board.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace curelay::backend {
namespace {

constexpr uint64_t kMagic = 0x3164707379616c65;  // "elaysdp1"

DispatchBoardLayout* Map(int fd, std::string* error) {
  void* mapping = mmap(nullptr, sizeof(DispatchBoardLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) {
    *error = std::string("mmap: ") + std::strerror(errno);
    return nullptr;
  }
  return static_cast<DispatchBoardLayout*>(mapping);
}

}  // namespace

DispatchBoard* DispatchBoard::Create(const std::string& path, std::string* error) {
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ftruncate(fd, sizeof(DispatchBoardLayout)) != 0) {
    *error = path + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return nullptr;
  }
  DispatchBoardLayout* layout = Map(fd, error);
  close(fd);
  if (layout == nullptr) return nullptr;
  layout->magic = kMagic;
  auto* board = new DispatchBoard(layout, path);
  for (int i = 0; i < kMaxDispatchSessions; ++i) board->Reset(i);
  return board;
}

DispatchBoard* DispatchBoard::Open(const std::string& path, std::string* error) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  struct stat info {};
  if (fd < 0 || fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) != sizeof(DispatchBoardLayout)) {
    *error = path + ": " + (fd < 0 ? std::strerror(errno) : "not a dispatch board");
    if (fd >= 0) close(fd);
    return nullptr;
  }
  DispatchBoardLayout* layout = Map(fd, error);
  close(fd);
  if (layout == nullptr) return nullptr;
  if (layout->magic != kMagic) {
    munmap(layout, sizeof(DispatchBoardLayout));
    *error = path + ": not a dispatch board";
    return nullptr;
  }
  return new DispatchBoard(layout, path);
}

DispatchBoard::~DispatchBoard() { munmap(layout_, sizeof(DispatchBoardLayout)); }

void DispatchBoard::Reset(int index) {
  SessionDispatchSlot& s = layout_->sessions[index];
  s.may_dispatch.store(1);
  s.inflight_budget_ns.store(std::numeric_limits<int64_t>::max());
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
