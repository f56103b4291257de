// Shim pieces testable without a session: handle registry, argument packing, module image sizes.
#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>

#include "frontend/client/handle_registry.h"
#include "frontend/client/host_mirrors.h"
#include "frontend/launch/argument_packing.h"
#include "frontend/module/image_size.h"

namespace curelay::frontend {
namespace {

struct Thing {
  int value;
};

TEST(HandleRegistryTest, TracksLiveHandlesOnly) {
  HandleRegistry<Thing> registry;
  Thing* a = registry.Create(1);
  Thing* b = registry.Create(2);
  EXPECT_TRUE(registry.Contains(a));
  EXPECT_TRUE(registry.Contains(b));
  EXPECT_TRUE(registry.Destroy(a));
  EXPECT_FALSE(registry.Contains(a));
  EXPECT_FALSE(registry.Destroy(a));
  int not_a_handle = 0;
  EXPECT_FALSE(registry.Contains(&not_a_handle));
  EXPECT_NE(NextObjectId(), NextObjectId());
}

// The layout of param_probe(u8, u16, u32, u64, f32, f64, struct{char; double; int[3]}, u64*) as CUDA lays it out.
const std::vector<uint32_t> kOffsets = {0, 2, 4, 8, 16, 24, 32, 64};
const std::vector<uint32_t> kSizes = {1, 2, 4, 8, 4, 8, 32, 8};

TEST(ArgumentPackingTest, KernelParamsLandAtTheirOffsets) {
  uint8_t u8 = 0x11;
  uint16_t u16 = 0x2222;
  uint32_t u32 = 0x33333333;
  uint64_t u64 = 0x4444444444444444;
  float f32 = 1.5f;
  double f64 = 2.25;
  struct {
    char c;
    double d;
    int i[3];
  } probe = {'z', 3.5, {1, 2, 3}};
  uint64_t out = 0xdeadbeef;
  void* params[] = {&u8, &u16, &u32, &u64, &f32, &f64, &probe, &out};
  std::vector<uint8_t> buffer;
  ASSERT_EQ(PackArguments({kOffsets, kSizes, 72}, params, nullptr, buffer), CUDA_SUCCESS);
  ASSERT_EQ(buffer.size(), 72u);
  EXPECT_EQ(buffer[0], 0x11);
  EXPECT_EQ(std::memcmp(&buffer[8], &u64, 8), 0);
  EXPECT_EQ(std::memcmp(&buffer[24], &f64, 8), 0);
  EXPECT_EQ(std::memcmp(&buffer[32], &probe, 32), 0);
  EXPECT_EQ(std::memcmp(&buffer[64], &out, 8), 0);
}

TEST(ArgumentPackingTest, ExtraBufferFormAndErrors) {
  std::vector<uint8_t> source(72);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i);
  size_t size = source.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, source.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  std::vector<uint8_t> buffer;
  ASSERT_EQ(PackArguments({kOffsets, kSizes, 72}, nullptr, extra, buffer), CUDA_SUCCESS);
  EXPECT_EQ(buffer, source);
  void* params[8] = {};
  EXPECT_EQ(PackArguments({kOffsets, kSizes, 72}, params, extra, buffer), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(PackArguments({kOffsets, kSizes, 72}, nullptr, nullptr, buffer), CUDA_ERROR_INVALID_VALUE);
  size_t too_small = 8;
  void* short_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, source.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                         &too_small, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(PackArguments({kOffsets, kSizes, 72}, nullptr, short_extra, buffer), CUDA_ERROR_INVALID_VALUE);
  const std::vector<uint32_t> none;
  EXPECT_EQ(PackArguments({none, none, 0}, nullptr, nullptr, buffer), CUDA_SUCCESS);
  EXPECT_TRUE(buffer.empty());
}

// A layout as the executor states it (a FunctionInfo), parsed as the shim parses every one it receives.
bool ParseLayout(const std::vector<uint32_t>& offsets, const std::vector<uint32_t>& sizes, KernelParameters* out) {
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(wire::CreateFunctionInfo(builder, builder.CreateVector(offsets), builder.CreateVector(sizes)));
  return ParseKernelParameters(flatbuffers::GetRoot<wire::FunctionInfo>(builder.GetBufferPointer()), out);
}

TEST(ArgumentPackingTest, LayoutsOfAnotherFormAreRefused) {
  KernelParameters parsed;
  ASSERT_TRUE(ParseLayout(kOffsets, kSizes, &parsed));
  EXPECT_EQ(parsed.argument_bytes, 72u);
  KernelParameters ignored;
  EXPECT_TRUE(ParseLayout({}, {}, &ignored));
  EXPECT_TRUE(ParseLayout({0, 32756}, {8, 8}, &ignored));  // exactly the driver's 32,764 bytes
  EXPECT_FALSE(ParseLayout({0, 32760}, {8, 8}, &ignored));  // beyond them
  EXPECT_FALSE(ParseLayout({0, 4}, {8, 8}, &ignored));      // overlapping the parameter before
  EXPECT_FALSE(ParseLayout({8, 0}, {8, 8}, &ignored));      // out of order
  EXPECT_FALSE(ParseLayout({0, 8}, {8, 0}, &ignored));      // a parameter of no bytes
  EXPECT_FALSE(ParseLayout({0, 8}, {8}, &ignored));         // arrays of different lengths
  EXPECT_FALSE(ParseLayout({0xfffffff8u}, {16}, &ignored)); // an end past 32 bits
}

TEST(ImageSizeTest, PtxIncludesItsTerminator) {
  const char ptx[] = ".version 8.0\n.target sm_90\n";
  EXPECT_EQ(ModuleImage(ptx, 1 << 20).size(), sizeof(ptx));
  const char unterminated[4] = {'a', 'b', 'c', 'd'};
  EXPECT_TRUE(ModuleImage(unterminated, sizeof(unterminated)).empty());
}

TEST(ImageSizeTest, FatbinSizeFromHeaderAndWrapper) {
  std::vector<uint8_t> fatbin(16 + 100, 0);
  const uint32_t magic = kFatbinMagic;
  const uint16_t version = 1, header_size = 16;
  const uint64_t payload = 100;
  std::memcpy(&fatbin[0], &magic, 4);
  std::memcpy(&fatbin[4], &version, 2);
  std::memcpy(&fatbin[6], &header_size, 2);
  std::memcpy(&fatbin[8], &payload, 8);
  EXPECT_EQ(ModuleImage(fatbin.data(), 1 << 20).size(), 116u);
  struct {
    int32_t magic, version;
    const void* data;
    void* unused;
  } wrapper = {static_cast<int32_t>(kFatbinWrapperMagic), 1, fatbin.data(), nullptr};
  const auto resolved = ModuleImage(&wrapper, 1 << 20);
  EXPECT_EQ(resolved.data(), fatbin.data());
  EXPECT_EQ(resolved.size(), 116u);
}

TEST(ImageSizeTest, ElfSizeCoversSectionsAndTables) {
  std::vector<uint8_t> elf(4096, 0);
  Elf64_Ehdr header{};
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = ELFCLASS64;
  header.e_shoff = 1024;
  header.e_shnum = 2;
  header.e_shentsize = sizeof(Elf64_Shdr);
  std::memcpy(elf.data(), &header, sizeof(header));
  Elf64_Shdr data_section{};
  data_section.sh_type = SHT_PROGBITS;
  data_section.sh_offset = 2000;
  data_section.sh_size = 500;
  std::memcpy(&elf[1024 + sizeof(Elf64_Shdr)], &data_section, sizeof(data_section));
  EXPECT_EQ(ModuleImage(elf.data(), elf.size()).size(), 2500u);
  EXPECT_TRUE(ModuleImage(elf.data(), 2000).empty());  // claims more than the caller allows
}

}  // namespace
}  // namespace curelay::frontend

// The client's mirrors around a free (frontend/client/host_mirrors.h): a leaving mirror's changes are no longer
// collected (the executor may have let go of its side), Remove erases only a mirror that is leaving, and a new mirror
// placed at the same device address before the old one's Remove starts afresh and survives that Remove.
TEST(ClientHostMirrorsTest, LeavingMirrorsAreNotCollectedAndRemoveTakesOnlyThem) {
  using curelay::frontend::HostMirrors;
  std::vector<uint8_t> first(4096, 0), second(8192, 0);
  HostMirrors mirrors;
  constexpr CUdeviceptr kAddress = 0x7000000000;
  mirrors.Add(first.data(), first.size(), kAddress, /*active=*/true);
  first[10] = 1;
  std::vector<curelay::wire::MirrorRange> runs;
  std::vector<uint8_t> data;
  mirrors.Collect(runs, data);
  EXPECT_EQ(runs.size(), 2u);  // the announcement, then the changed byte
  first[11] = 2;
  mirrors.Leave(kAddress);
  runs.clear();
  data.clear();
  mirrors.Collect(runs, data);
  EXPECT_TRUE(runs.empty()) << "a leaving mirror's changes were collected";
  mirrors.Stay(kAddress);  // the executor could not let go: it is a mirror like any other again
  mirrors.Collect(runs, data);
  EXPECT_EQ(runs.size(), 1u);
  mirrors.Remove(kAddress);  // not leaving: kept
  EXPECT_TRUE(mirrors.any_active());
  mirrors.Leave(kAddress);
  mirrors.Add(second.data(), second.size(), kAddress, /*active=*/true);  // another thread's new mirror, same address
  mirrors.Remove(kAddress);  // the first one's Remove, late
  EXPECT_TRUE(mirrors.any_active());
  second[8000] = 3;
  runs.clear();
  data.clear();
  mirrors.Collect(runs, data);
  ASSERT_EQ(runs.size(), 2u);  // announced afresh, and its own byte
  EXPECT_EQ(runs[1].offset(), 8000u);
  mirrors.Leave(kAddress);
  mirrors.Remove(kAddress);
  EXPECT_FALSE(mirrors.any_active());
}

// A reply's payload landing in place in mirrored memory: an executor update read before that reply refreshes the
// shadow there but leaves the landed bytes, which then go back to the executor as this side's change.
TEST(ClientHostMirrorsTest, UpdatesLeaveLandingBytesAndRefreshTheirShadow) {
  using curelay::frontend::HostMirrors;
  std::vector<uint8_t> memory(4096, 0);
  HostMirrors mirrors;
  constexpr CUdeviceptr kAddress = 0x7100000000;
  mirrors.BeginLanding(1, memory.data(), 64);
  EXPECT_FALSE(mirrors.any_landing()) << "a landing outside every mirror was recorded";
  mirrors.Add(memory.data(), memory.size(), kAddress, /*active=*/true);
  std::vector<curelay::wire::MirrorRange> runs;
  std::vector<uint8_t> data;
  mirrors.Collect(runs, data);  // the announcement only
  // Two landings inside one run of the update, one of them reaching past its end.
  mirrors.BeginLanding(7, memory.data() + 100, 50);
  mirrors.BeginLanding(8, memory.data() + 180, 200);
  ASSERT_TRUE(mirrors.any_landing());
  for (size_t i = 100; i < 150; ++i) memory[i] = 0xAA;  // what the lanes wrote
  for (size_t i = 180; i < 380; ++i) memory[i] = 0xBB;
  const auto apply = [&](uint64_t offset, uint64_t bytes, uint8_t value) {
    flatbuffers::FlatBufferBuilder builder;
    const curelay::wire::MirrorRange run(kAddress, offset, bytes);
    builder.Finish(curelay::wire::CreateMirrorUpdate(builder, builder.CreateVectorOfStructs(&run, 1)));
    const std::vector<uint8_t> payload(bytes, value);
    return mirrors.Apply(*flatbuffers::GetRoot<curelay::wire::MirrorUpdate>(builder.GetBufferPointer()), payload);
  };
  ASSERT_TRUE(apply(50, 250, 0x11));  // [50, 300)
  for (size_t i = 50; i < 100; ++i) ASSERT_EQ(memory[i], 0x11) << i;
  for (size_t i = 100; i < 150; ++i) ASSERT_EQ(memory[i], 0xAA) << i;
  for (size_t i = 150; i < 180; ++i) ASSERT_EQ(memory[i], 0x11) << i;
  for (size_t i = 180; i < 380; ++i) ASSERT_EQ(memory[i], 0xBB) << i;
  EXPECT_EQ(memory[49], 0);
  // The landed bytes differ from the refreshed shadow wherever the update wrote around them: they go back.
  runs.clear();
  data.clear();
  mirrors.Collect(runs, data);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].offset(), 100u);
  EXPECT_EQ(runs[0].bytes(), 50u);
  EXPECT_EQ(runs[1].offset(), 180u);
  EXPECT_EQ(runs[1].bytes(), 200u);  // beyond the update too: the shadow there was still zero
  // The first landing's payload did land in place: its bytes stay. The second's never does (say the session broke):
  // what the update would have written there is written after all, and beyond the update the bytes stay as they are.
  mirrors.EndLanding(7, memory.data() + 100);
  ASSERT_TRUE(mirrors.any_landing());
  for (size_t i = 100; i < 150; ++i) ASSERT_EQ(memory[i], 0xAA) << i;
  mirrors.EndAllLandings();
  EXPECT_FALSE(mirrors.any_landing());
  for (size_t i = 180; i < 300; ++i) ASSERT_EQ(memory[i], 0x11) << i;
  for (size_t i = 300; i < 380; ++i) ASSERT_EQ(memory[i], 0xBB) << i;
  // An unplaced landing's reply (an error, an inline payload) writes the updates it held back, in their order,
  // around a landing still open.
  mirrors.BeginLanding(9, memory.data() + 500, 100);
  mirrors.BeginLanding(10, memory.data() + 550, 100);
  ASSERT_TRUE(apply(500, 20, 0x33));
  ASSERT_TRUE(apply(510, 80, 0x44));
  mirrors.EndLanding(9, nullptr);
  for (size_t i = 500; i < 510; ++i) ASSERT_EQ(memory[i], 0x33) << i;
  for (size_t i = 510; i < 550; ++i) ASSERT_EQ(memory[i], 0x44) << i;
  for (size_t i = 550; i < 590; ++i) ASSERT_EQ(memory[i], 0) << i << ": landing 10 is still open";
  mirrors.EndLanding(10, memory.data() + 500);  // not where it was to land: unplaced too
  for (size_t i = 550; i < 590; ++i) ASSERT_EQ(memory[i], 0x44) << i;
  EXPECT_FALSE(mirrors.any_landing());
  // Once their replies are read, updates write everywhere again.
  ASSERT_TRUE(apply(0, 400, 0x22));
  for (size_t i = 0; i < 400; ++i) ASSERT_EQ(memory[i], 0x22) << i;
}
