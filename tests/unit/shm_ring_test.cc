// The shared-memory ring between two real processes: byte order across wrap-around, and a hostile peer's indices.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <new>
#include <random>
#include <vector>

#include "transport/shm/shm_ring.h"

namespace curelay::transport {
namespace {

constexpr uint64_t kCapacity = 4093;  // odd, so writes wrap at every offset

struct Shared {
  void* memory;
  ShmRing ring;
};

Shared MakeRing() {
  void* memory = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* control = new (memory) ShmRingControl{};
  return {memory, ShmRing(control, static_cast<uint8_t*>(memory) + sizeof(ShmRingControl), kCapacity)};
}

TEST(ShmRingTest, StreamsBytesInOrderAcrossProcessesAndWraps) {
  Shared shared = MakeRing();
  const auto alive = [] { return true; };
  const size_t total = 8 << 20;
  const pid_t writer = fork();
  if (writer == 0) {
    std::mt19937 random(5);
    std::vector<uint8_t> bytes(total);
    for (size_t i = 0; i < total; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + i / 251);
    for (size_t offset = 0; offset < total;) {
      const size_t chunk = std::min<size_t>(1 + random() % 9000, total - offset);
      if (shared.ring.Write(bytes.data() + offset, chunk, 10, alive) != RingStatus::kOk) _exit(1);
      offset += chunk;
    }
    _exit(0);
  }
  std::mt19937 random(6);
  std::vector<uint8_t> received(total);
  for (size_t offset = 0; offset < total;) {
    const size_t chunk = std::min<size_t>(1 + random() % 7000, total - offset);
    ASSERT_EQ(shared.ring.Read(received.data() + offset, chunk, 10, 5000, alive), RingStatus::kOk);
    offset += chunk;
  }
  int status = 0;
  waitpid(writer, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(received[i], static_cast<uint8_t>(i * 7 + i / 251)) << i;
  munmap(shared.memory, 1 << 20);
}

TEST(ShmRingTest, HostileIndicesAreReportedNotFollowed) {
  Shared shared = MakeRing();
  auto* control = static_cast<ShmRingControl*>(shared.memory);
  const auto alive = [] { return true; };
  control->head.store(kCapacity * 10);  // a producer claiming more than the ring can hold
  uint8_t byte;
  EXPECT_EQ(shared.ring.Read(&byte, 1, 0, 100, alive), RingStatus::kBroken);
  control->head.store(0);
  control->tail.store(12345);  // a consumer claiming to have read bytes never written
  // The producer reads the tail when the room it knew of runs out: the ring is full after kCapacity bytes.
  std::vector<uint8_t> fill(kCapacity);
  EXPECT_EQ(shared.ring.Write(fill.data(), fill.size(), 0, alive), RingStatus::kOk);
  EXPECT_EQ(shared.ring.Write(&byte, 1, 0, alive), RingStatus::kBroken);
  munmap(shared.memory, 1 << 20);
}

TEST(ShmRingTest, ReadTimesOutAndNoticesALostPeer) {
  Shared shared = MakeRing();
  uint8_t byte;
  EXPECT_EQ(shared.ring.Read(&byte, 1, 0, 50, [] { return true; }), RingStatus::kTimeout);
  EXPECT_EQ(shared.ring.Read(&byte, 1, 0, -1, [] { return false; }), RingStatus::kPeerLost);
  munmap(shared.memory, 1 << 20);
}

}  // namespace
}  // namespace curelay::transport
