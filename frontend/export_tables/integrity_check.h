// The answer to the CUDA runtime's integrity check: slot 1 of the private export table d4082055-… (see
// docs/research/integrity-check.md). The runtime computes the same value itself and stops with error 103
// (cudaErrorSoftwareValidityNotEstablished) when the driver's answer differs. The value covers facts about the
// calling process (pid, thread, addresses of the shim's own tables), so the shim computes it in the client and never
// asks the executor. Everything here is pure: the caller gathers the inputs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace curelay::frontend {

// The table id in the byte order cuGetExportTable receives it.
inline constexpr std::array<uint8_t, 16> kIntegrityTableId = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                                                              0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};
// The CudartInterface table, whose address is one of the hashed inputs.
inline constexpr std::array<uint8_t, 16> kCudartInterfaceTableId = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                                                    0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
// Words in the table: word 0 holds the table's size in bytes (3 * sizeof(void*)), word 1 the check, word 2 a
// function `CUresult(int)` that answers CUDA_SUCCESS.
inline constexpr size_t kIntegrityTableWords = 3;

// One device as the client presents it. Devices are hashed in ordinal order, all that cuDeviceGetCount reports.
struct IntegrityDevice {
  std::array<uint8_t, 16> uuid{};  // cuDeviceGetUuid
  int32_t pci_domain = 0;          // CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID
  int32_t pci_bus = 0;             // CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
  int32_t pci_device = 0;          // CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID (the slot number, not the product id)
};

// Every input of the check. The runtime recomputes it from what this process shows it, so each value must be the
// one the client sees, not the executor's.
struct IntegrityInputs {
  uint32_t driver_version = 0;          // what cuDriverGetVersion answers this process
  uint32_t version = 0;                 // slot 1's first argument
  uint64_t unix_seconds = 0;            // slot 1's second argument
  uint32_t process_id = 0;              // getpid()
  uint32_t thread_id = 0;               // pthread_self() of the calling thread, cut to its low 32 bits
  uint64_t integrity_table = 0;         // address of the table handed out for kIntegrityTableId
  uint64_t cudart_interface_table = 0;  // address of the table handed out for kCudartInterfaceTableId
  uint64_t check_function = 0;          // the value in word 1 of the integrity table
  std::span<const IntegrityDevice> devices;
};

// The fixed answer for versions whose last decimal digit is 0 or 1; nullopt for the versions that are hashed.
std::optional<std::array<uint64_t, 2>> FixedIntegrityAnswer(uint32_t version);

// What slot 1 writes to its `uint64_t out[2]`. For hashed versions the 16 digest bytes are the bytes of out[0] and
// out[1] as they lie in memory.
std::array<uint64_t, 2> ComputeIntegrityCheck(const IntegrityInputs& inputs);

// Building blocks, exposed for the unit tests.
namespace integrity_internal {

inline constexpr size_t kHeaderBytes = 48;
inline constexpr size_t kDeviceBytes = 28;

// The message's fixed part: the 64-bit layout, little-endian.
std::array<uint8_t, kHeaderBytes> EncodeHeader(const IntegrityInputs& inputs);
// One device's part of the message: uuid, then domain, bus, device as little-endian 32-bit integers.
std::array<uint8_t, kDeviceBytes> EncodeDevice(const IntegrityDevice& device);

// MD2 (RFC 1319), streaming.
class Md2 {
 public:
  // The whole state, laid out like the raw state arrays in ZLUDA's unit tests so that their vectors can be checked:
  // the 48-byte work buffer (digest so far, current block, their XOR), the running checksum, the number of bytes
  // already in the current block, and the last checksum byte written.
  struct State {
    std::array<uint8_t, 48> work{};
    std::array<uint8_t, 16> checksum{};
    uint8_t block_fill = 0;
    uint8_t last_checksum = 0;
  };

  Md2() = default;
  explicit Md2(const State& state) : state_(state) {}

  void Update(std::span<const uint8_t> bytes);
  // Pads, appends the checksum and returns the digest. The object is spent afterwards.
  std::array<uint8_t, 16> Finish();
  const State& state() const { return state_; }

 private:
  void Absorb(uint8_t byte);
  void Compress();

  State state_;
};

// The integrity check's fixed 16-byte key.
extern const std::array<uint8_t, 16> kKey;

// HMAC (RFC 2104) over MD2 with a 16-byte key (MD2's block size, so the key is used as is), streaming.
class HmacMd2 {
 public:
  explicit HmacMd2(std::span<const uint8_t, 16> key);
  void Update(std::span<const uint8_t> bytes) { inner_.Update(bytes); }
  std::array<uint8_t, 16> Finish();

 private:
  std::array<uint8_t, 16> key_;
  Md2 inner_;
};

}  // namespace integrity_internal
}  // namespace curelay::frontend
