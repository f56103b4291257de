#include "frontend/api/shareable_handle_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace curelay::frontend {
namespace {

struct ShareableRecord {
  char magic[8];
  uint32_t version;
  int32_t device;
  uint8_t token[kShareableTokenBytes];
};
constexpr char kMagic[8] = {'c', 'u', 'r', 'e', 'l', 'a', 'y', 'H'};
constexpr uint32_t kVersion = 1;
constexpr unsigned int kNoExecSeal = 0x0008;  // MFD_NOEXEC_SEAL (Linux 6.3), which older headers lack

}  // namespace

CUresult WrapShareableToken(const flatbuffers::Vector<uint8_t>* token, int32_t device, int* descriptor) {
  ShareableRecord record{};
  if (token == nullptr || token->size() != sizeof(record.token)) return CUDA_ERROR_UNKNOWN;  // a malformed answer
  std::memcpy(record.magic, kMagic, sizeof(record.magic));
  record.version = kVersion;
  record.device = device;
  std::memcpy(record.token, token->data(), sizeof(record.token));
  // Not close-on-exec: the driver's descriptor is not either, and programs hand it to the processes they start.
  int fd = memfd_create("curelay-shareable-handle", MFD_ALLOW_SEALING);
  // A kernel with vm.memfd_noexec = 2 refuses a memfd that could be made executable.
  if (fd < 0 && (errno == EACCES || errno == EINVAL)) {
    fd = memfd_create("curelay-shareable-handle", MFD_ALLOW_SEALING | kNoExecSeal);
  }
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  if (pwrite(fd, &record, sizeof(record), 0) != static_cast<ssize_t>(sizeof(record)) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    close(fd);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  *descriptor = fd;
  return CUDA_SUCCESS;
}

bool UnwrapShareableToken(int descriptor, uint8_t (&token)[kShareableTokenBytes], int32_t* device) {
  ShareableRecord record{};
  if (descriptor < 0 || pread(descriptor, &record, sizeof(record), 0) != static_cast<ssize_t>(sizeof(record)) ||
      std::memcmp(record.magic, kMagic, sizeof(record.magic)) != 0 || record.version != kVersion) {
    return false;
  }
  std::memcpy(token, record.token, sizeof(token));
  *device = record.device;
  return true;
}

}  // namespace curelay::frontend
