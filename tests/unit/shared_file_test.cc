// Shared files as both processes map them: a mapping moved to where the other process placed the file keeps its
// pages and its sharing, and a move never lands on memory already mapped.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "transport/shm/shared_file.h"

namespace curelay::transport {
namespace {

constexpr size_t kBytes = 3 * 4096;

bool Mapped(void* address) { return msync(address, 4096, MS_ASYNC) == 0 || errno != ENOMEM; }

// An address range that nothing in this process maps right now.
void* FreeRange(size_t bytes) {
  void* probe = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(probe, MAP_FAILED);
  munmap(probe, bytes);
  return probe;
}

class SharedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/curelay-shared-file-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
    std::string error;
    creator_ = CreateSharedFile(directory_, "hostmem", kBytes, &path_, &error);
    ASSERT_NE(creator_, nullptr) << error;
    opener_ = OpenSharedFile(path_, directory_, "hostmem", kBytes, &error);
    ASSERT_NE(opener_, nullptr) << error;
  }
  void TearDown() override {
    if (creator_ != nullptr) munmap(creator_, kBytes);
    if (opener_ != nullptr) munmap(opener_, kBytes);
    rmdir(directory_.c_str());
  }
  std::string directory_, path_;
  void* creator_ = nullptr;
  void* opener_ = nullptr;
};

TEST_F(SharedFileTest, AMovedMappingKeepsItsBytesAndStaysShared) {
  std::memset(creator_, 0x5a, kBytes);
  void* target = FreeRange(kBytes);
  ASSERT_TRUE(MoveMapping(creator_, kBytes, target));
  EXPECT_FALSE(Mapped(creator_));
  void* old = creator_;
  creator_ = target;
  ASSERT_NE(old, target);
  auto* moved = static_cast<unsigned char*>(target);
  EXPECT_EQ(moved[0], 0x5a);
  EXPECT_EQ(moved[kBytes - 1], 0x5a);
  moved[4096 + 7] = 0x11;  // written after the move: the other mapping of the file sees it
  EXPECT_EQ(static_cast<unsigned char*>(opener_)[4096 + 7], 0x11);
  static_cast<unsigned char*>(opener_)[2] = 0x22;
  EXPECT_EQ(moved[2], 0x22);
}

TEST_F(SharedFileTest, AMoveOntoMappedMemoryFailsAndLeavesBothMappingsAsTheyWere) {
  std::memset(creator_, 0x33, kBytes);
  // The target overlaps a mapping of this process by one page only: still refused.
  void* occupied = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(occupied, MAP_FAILED);
  std::memset(occupied, 0x44, 4096);
  void* target = static_cast<unsigned char*>(occupied) - 4096;
  EXPECT_FALSE(MoveMapping(creator_, kBytes, target));
  EXPECT_EQ(static_cast<unsigned char*>(occupied)[100], 0x44);
  EXPECT_EQ(static_cast<unsigned char*>(creator_)[kBytes - 1], 0x33);
  static_cast<unsigned char*>(creator_)[9] = 0x66;
  EXPECT_EQ(static_cast<unsigned char*>(opener_)[9], 0x66);
  munmap(occupied, 4096);
}

TEST_F(SharedFileTest, MovingAMappingWhereItAlreadyIsSucceeds) {
  EXPECT_TRUE(MoveMapping(creator_, kBytes, creator_));
  EXPECT_TRUE(Mapped(creator_));
}

}  // namespace
}  // namespace curelay::transport
