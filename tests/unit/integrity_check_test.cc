// The integrity-check answer (frontend/export_tables/integrity_check.h; docs/research/integrity-check.md).
//
// Vectors, and where they come from:
// - MD2 digests: RFC 1319, appendix A.5.
// - Raw MD2 states: the unit tests of vosen/ZLUDA dark_api/src/lib.rs @ 8a7931be87d7 (integrity_check_pass2 to
//   _pass5). Their inputs were captured from a real CUDA 12.8 process. Each 66-byte state is the work buffer (48),
//   the checksum (16), the block fill and the last checksum byte.
// - End-to-end answers: HMAC-MD2 computed for this test with a separate implementation (Debian's
//   python3-pycryptodome 3.11, Cryptodome.Hash.HMAC over Cryptodome.Hash.MD2). A literal Python transcription of
//   ZLUDA's routine gave the same answer for the one-device case. No public source gives an end-to-end vector.
// - The real driver's answers (driver 580, CUDA 13.0), captured on the GPU host with
//   tests/gpu/probes/export_trace/integrity_vectors.c: MatchesTheRealDriver.
#include "frontend/export_tables/integrity_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace curelay::frontend {
namespace {

using integrity_internal::EncodeDevice;
using integrity_internal::EncodeHeader;
using integrity_internal::HmacMd2;
using integrity_internal::kKey;
using integrity_internal::Md2;

std::vector<uint8_t> Hex(std::string_view text) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < text.size(); i += 2) out.push_back(std::stoi(std::string(text.substr(i, 2)), nullptr, 16));
  return out;
}

std::string ToHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

Md2::State StateFromHex(std::string_view text) {
  const std::vector<uint8_t> raw = Hex(text);
  EXPECT_EQ(raw.size(), 66u);
  Md2::State state;
  std::copy_n(raw.begin(), 48, state.work.begin());
  std::copy_n(raw.begin() + 48, 16, state.checksum.begin());
  state.block_fill = raw[64];
  state.last_checksum = raw[65];
  return state;
}

std::string StateToHex(const Md2::State& state) {
  std::vector<uint8_t> raw(state.work.begin(), state.work.end());
  raw.insert(raw.end(), state.checksum.begin(), state.checksum.end());
  raw.push_back(state.block_fill);
  raw.push_back(state.last_checksum);
  return ToHex(raw);
}

std::string AnswerHex(const std::array<uint64_t, 2>& answer) {
  uint8_t bytes[16];
  std::memcpy(bytes, answer.data(), sizeof(bytes));
  return ToHex(bytes);
}

std::span<const uint8_t> Bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// The inputs behind ZLUDA's vectors (a CUDA 12.8 runtime on a driver reporting 12080, one GPU at 0000:02:00).
IntegrityInputs ZludaInputs() {
  IntegrityInputs inputs;
  inputs.driver_version = 12080;
  inputs.version = 12082;
  inputs.unix_seconds = 0x682b9cee;
  inputs.process_id = 0x002fa423;
  inputs.thread_id = 0xf79c1000;
  inputs.integrity_table = 0x00007ffff6958220;
  inputs.cudart_interface_table = 0x00007ffff6958240;
  inputs.check_function = 0x00007ffff2aaf4a0;
  return inputs;
}

IntegrityDevice ZludaDevice() {
  IntegrityDevice device;
  const std::vector<uint8_t> uuid = Hex("9afe2b8aac252d38ea37aec56d71325f");
  std::copy(uuid.begin(), uuid.end(), device.uuid.begin());
  device.pci_domain = 0;
  device.pci_bus = 2;
  device.pci_device = 0;
  return device;
}

// The real driver's answers (driver 580, CUDA 13.0, one GPU), captured on the GPU host with
// tests/gpu/probes/export_trace/integrity_vectors.c together with every input they depend on.
IntegrityInputs GpuHostInputs() {
  IntegrityInputs inputs;
  inputs.driver_version = 13000;
  inputs.process_id = 426;
  inputs.thread_id = 300574528;
  inputs.integrity_table = 0x7f9911a4c660;
  inputs.cudart_interface_table = 0x7f9911a4c680;
  inputs.check_function = 0x7f990c3ab350;
  return inputs;
}

IntegrityDevice GpuHostDevice() {
  IntegrityDevice device;
  const std::vector<uint8_t> uuid = Hex("d3bd1a44bb7ee571526529d9e238aca2");
  std::copy(uuid.begin(), uuid.end(), device.uuid.begin());
  device.pci_domain = 0;
  device.pci_bus = 0;
  device.pci_device = 6;
  return device;
}

TEST(IntegrityCheckTest, MatchesTheRealDriver) {
  const IntegrityDevice devices[] = {GpuHostDevice()};
  struct Case {
    uint32_t version;
    uint64_t unix_seconds;
    std::array<uint64_t, 2> out;
  };
  const Case cases[] = {
      {13002, 1700000000, {0x3d930e8d661cd9a1, 0x70b43ba953c78cdb}},
      {13002, 1763700000, {0x2922d7438c8804f2, 0xdcc86729861cacef}},
      {13003, 1700000000, {0x07c38635a124c4df, 0x867db6b3b159c107}},
      {12082, 1763700000, {0x03e23d44333131db, 0xb6af721a19324cec}},
      {13000, 1700000000, {0x3341181c03cb675c, 0x8ed383aa1f4cd1e8}},
      {13001, 1700000000, {0x1841181c03cb675c, 0x8ed383aa1f4cd1e8}},
  };
  for (const Case& c : cases) {
    IntegrityInputs inputs = GpuHostInputs();
    inputs.devices = devices;
    inputs.version = c.version;
    inputs.unix_seconds = c.unix_seconds;
    EXPECT_EQ(ComputeIntegrityCheck(inputs), c.out) << c.version << " at " << c.unix_seconds;
  }
}

TEST(Md2Test, Rfc1319Vectors) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"", "8350e5a3e24c153df2275c9f80692773"},
      {"a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"},
      {"abc", "da853b0d3f88d99b30283a69e6ded6bb"},
      {"message digest", "ab4f496bfb2a530b219ff33031fe06b0"},
      {"abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b"},
      {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", "da33def2a42df13975352846c30338cd"},
      {"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
       "d5976f79d83d3a0dc9806c3c66f3efd8"},
  };
  for (const auto& [message, digest] : cases) {
    Md2 md2;
    md2.Update(Bytes(message));
    EXPECT_EQ(ToHex(md2.Finish()), digest) << "MD2(\"" << message << "\")";
  }
}

TEST(Md2Test, SplitUpdatesMatchOneUpdate) {
  const std::string_view message = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  for (size_t split = 0; split <= message.size(); ++split) {
    Md2 md2;
    md2.Update(Bytes(message.substr(0, split)));
    md2.Update(Bytes(message.substr(split)));
    EXPECT_EQ(ToHex(md2.Finish()), "da33def2a42df13975352846c30338cd") << "split at " << split;
  }
}

// ZLUDA's pass2: the inner key block (key XOR 0x36) absorbed into a fresh state.
constexpr std::string_view kAfterInnerKey =
    "8b219a49e86d1aeef237f9b54a8c3c75c71eee21cf298ae51383f4ec3304e2fdb02f09014ff7686d6946437eb62b21ed"
    "57a110860e60441e705f67d1eb67a13d003d";

TEST(IntegrityCheckTest, InnerKeyBlockMatchesZludaState) {
  std::array<uint8_t, 16> inner_key;
  for (size_t i = 0; i < 16; ++i) inner_key[i] = kKey[i] ^ 0x36;
  Md2 md2;
  md2.Update(inner_key);
  EXPECT_EQ(StateToHex(md2.state()), kAfterInnerKey);
}

// ZLUDA's pass3: the 48-byte header absorbed after the inner key block (a chained step).
TEST(IntegrityCheckTest, HeaderMatchesZludaState) {
  Md2 md2(StateFromHex(kAfterInnerKey));
  md2.Update(EncodeHeader(ZludaInputs()));
  EXPECT_EQ(StateToHex(md2.state()),
            "0afdabc9ff9ba0be4d303282744fa7489d2382a387fa6cdb9249d9b54b2b5e516ef7f94d288a640619b3e6bea4ec7e54"
            "6428d9e1d434c0a94988c96158dd66740074");
}

// ZLUDA's pass4: one 28-byte device record absorbed into a captured state.
TEST(IntegrityCheckTest, DeviceRecordMatchesZludaState) {
  Md2 md2(
      StateFromHex("84fd9310c6dbb3bc49c225e7da6e226f9bbd8159c3019a7a2634390f2a5613b1f6bc7fa18f04a54d0d78ab20"
                   "f82320a53f6736e2de8ae5dfe1f20394addc9ada00da"));
  md2.Update(EncodeDevice(ZludaDevice()));
  EXPECT_EQ(StateToHex(md2.state()),
            "1fd825d2dffa64c7b61aaf22b879fb960000000002000000000000007c9d46d21fd825d2ddfa64c7b61aaf22e617bd3a"
            "d7dd5f828c87ce8666afa0507a7dbbbc0c50");
}

// ZLUDA's pass5: padding and checksum on a captured state (block_fill 0, so a full block of padding).
TEST(IntegrityCheckTest, FinishMatchesZludaState) {
  Md2 md2(
      StateFromHex("3e4bf29571f56b5107bf4bf1040e8e0b5f4d300c0f0caefb48af23b5ea4cc2dbd7df88743958163a1f7c9b20"
                   "7e7e94c88bc6b2380d077dbd90d53963eb1d4f400040"));
  EXPECT_EQ(ToHex(md2.Finish()), "002353065e96f69c61aa962d2ecda858");
  EXPECT_EQ(StateToHex(md2.state()),
            "002353065e96f69c61aa962d2ecda858e9cac02e35ed5fcae10ecd1fd08e8b9c294d1c946bf710b0070891d61406c0ec"
            "e19c8e33d4e9435c860c724d2798917f007f");
}

TEST(IntegrityCheckTest, HeaderAndDeviceLayout) {
  EXPECT_EQ(ToHex(EncodeHeader(ZludaInputs())),
            "302f0000322f000023a42f0000109cf7"    // driver version, version, pid, thread
            "408295f6ff7f0000208295f6ff7f0000"    // CudartInterface table, integrity table
            "a0f4aaf2ff7f0000ee9c2b6800000000");  // check function, seconds
  EXPECT_EQ(ToHex(EncodeDevice(ZludaDevice())), "9afe2b8aac252d38ea37aec56d71325f000000000200000000000000");
}

TEST(IntegrityCheckTest, EndToEndAnswers) {
  IntegrityInputs inputs = ZludaInputs();
  EXPECT_EQ(AnswerHex(ComputeIntegrityCheck(inputs)), "0779ef5e4ffa2dd207527503d1907bfa");

  const IntegrityDevice one[] = {ZludaDevice()};
  inputs.devices = one;
  EXPECT_EQ(AnswerHex(ComputeIntegrityCheck(inputs)), "4448a171b026cef76c8c3e39051b02dd");

  IntegrityDevice second;
  for (int i = 0; i < 16; ++i) second.uuid[i] = static_cast<uint8_t>(i);
  second.pci_domain = 1;
  second.pci_bus = 0x41;
  second.pci_device = 3;
  const IntegrityDevice two[] = {ZludaDevice(), second};
  inputs.devices = two;
  EXPECT_EQ(AnswerHex(ComputeIntegrityCheck(inputs)), "a7325396d9c16422022987ca53b5081d");
}

TEST(IntegrityCheckTest, HmacIsTheInnerThenOuterMd2) {
  // RFC 2104 spelled out with plain MD2, for the one-device message.
  std::vector<uint8_t> message;
  const auto header = EncodeHeader(ZludaInputs());
  const auto device = EncodeDevice(ZludaDevice());
  message.insert(message.end(), header.begin(), header.end());
  message.insert(message.end(), device.begin(), device.end());
  std::array<uint8_t, 16> pad;
  Md2 inner;
  for (size_t i = 0; i < 16; ++i) pad[i] = kKey[i] ^ 0x36;
  inner.Update(pad);
  inner.Update(message);
  const auto inner_digest = inner.Finish();
  Md2 outer;
  for (size_t i = 0; i < 16; ++i) pad[i] = kKey[i] ^ 0x5c;
  outer.Update(pad);
  outer.Update(inner_digest);
  EXPECT_EQ(ToHex(outer.Finish()), "4448a171b026cef76c8c3e39051b02dd");

  HmacMd2 mac(kKey);
  mac.Update(message);
  EXPECT_EQ(ToHex(mac.Finish()), "4448a171b026cef76c8c3e39051b02dd");
}

TEST(IntegrityCheckTest, VersionsEndingInZeroOrOneGetFixedAnswers) {
  const std::array<uint64_t, 2> zero = {0x3341181C03CB675C, 0x8ED383AA1F4CD1E8};
  const std::array<uint64_t, 2> one = {0x1841181C03CB675C, 0x8ED383AA1F4CD1E8};
  IntegrityInputs inputs = ZludaInputs();
  for (uint32_t version : {12080u, 12090u, 13000u, 13010u, 0u}) {
    inputs.version = version;
    EXPECT_EQ(ComputeIntegrityCheck(inputs), zero) << version;
    EXPECT_EQ(FixedIntegrityAnswer(version), zero) << version;
  }
  for (uint32_t version : {12081u, 12091u, 13001u, 13011u, 1u}) {
    inputs.version = version;
    EXPECT_EQ(ComputeIntegrityCheck(inputs), one) << version;
    EXPECT_EQ(FixedIntegrityAnswer(version), one) << version;
  }
  // The fixed answers ignore everything else.
  inputs.version = 13000;
  inputs.process_id += 1;
  inputs.unix_seconds += 1;
  EXPECT_EQ(ComputeIntegrityCheck(inputs), zero);
}

TEST(IntegrityCheckTest, OtherVersionsAreHashed) {
  IntegrityInputs inputs = ZludaInputs();
  const IntegrityDevice one[] = {ZludaDevice()};
  inputs.devices = one;
  std::vector<std::array<uint64_t, 2>> seen;
  for (uint32_t version = 13000; version < 13010; ++version) {
    inputs.version = version;
    const auto answer = ComputeIntegrityCheck(inputs);
    if (version % 10 >= 2) {
      EXPECT_FALSE(FixedIntegrityAnswer(version).has_value()) << version;
      EXPECT_EQ(std::count(seen.begin(), seen.end(), answer), 0) << version;
    }
    seen.push_back(answer);
  }
}

TEST(IntegrityCheckTest, Deterministic) {
  IntegrityInputs inputs = ZludaInputs();
  const IntegrityDevice one[] = {ZludaDevice()};
  inputs.devices = one;
  const auto first = ComputeIntegrityCheck(inputs);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ComputeIntegrityCheck(inputs), first);
  IntegrityInputs copy = inputs;
  const IntegrityDevice again[] = {ZludaDevice()};
  copy.devices = again;
  EXPECT_EQ(ComputeIntegrityCheck(copy), first);
}

TEST(IntegrityCheckTest, EveryInputChangesTheAnswer) {
  IntegrityDevice second;
  second.uuid.fill(0x5a);
  second.pci_domain = 0;
  second.pci_bus = 0x81;
  second.pci_device = 0;
  const IntegrityDevice devices[] = {ZludaDevice(), second};
  IntegrityInputs base = ZludaInputs();
  base.devices = devices;
  const auto reference = ComputeIntegrityCheck(base);

  auto changed = [&](auto mutate) {
    IntegrityInputs inputs = base;
    std::vector<IntegrityDevice> local(base.devices.begin(), base.devices.end());
    mutate(inputs, local);
    inputs.devices = local;
    return ComputeIntegrityCheck(inputs) != reference;
  };
  using D = std::vector<IntegrityDevice>;
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { in.driver_version += 10; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { in.version += 1; }));  // 12082 -> 12083, still hashed
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { in.unix_seconds += 1; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { in.unix_seconds ^= uint64_t{1} << 40; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { in.process_id += 1; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { in.thread_id ^= 0x80000000; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { in.integrity_table += 8; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { in.cudart_interface_table += 8; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { in.check_function += 16; }));
  // The two table addresses are hashed in a fixed order, so swapping them matters.
  EXPECT_TRUE(changed([](IntegrityInputs& in, D&) { std::swap(in.integrity_table, in.cudart_interface_table); }));
  for (size_t d = 0; d < 2; ++d) {
    for (size_t byte = 0; byte < 16; ++byte) {
      EXPECT_TRUE(changed([&](IntegrityInputs&, D& list) { list[d].uuid[byte] ^= 1; })) << d << " " << byte;
    }
    EXPECT_TRUE(changed([&](IntegrityInputs&, D& list) { list[d].pci_domain += 1; })) << d;
    EXPECT_TRUE(changed([&](IntegrityInputs&, D& list) { list[d].pci_bus += 1; })) << d;
    EXPECT_TRUE(changed([&](IntegrityInputs&, D& list) { list[d].pci_device += 1; })) << d;
  }
  EXPECT_TRUE(changed([](IntegrityInputs&, D& list) { std::swap(list[0], list[1]); }));
  EXPECT_TRUE(changed([](IntegrityInputs&, D& list) { list.pop_back(); }));
  EXPECT_TRUE(changed([](IntegrityInputs&, D& list) { list.clear(); }));
  EXPECT_TRUE(changed([](IntegrityInputs&, D& list) { list.push_back(list[0]); }));
}

}  // namespace
}  // namespace curelay::frontend
