#include "not_supported.h"

#include <cuda.h>
#include <errno.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>

#include "driver_table.h"  // generated; see frontend/codegen/

namespace curelay::frontend {
namespace {

static_assert(sizeof(CUresult) == sizeof(int),
              "stubs return CUresult as int; the ABI must match");
static_assert(CUDA_ERROR_NOT_SUPPORTED == 801);
static_assert(std::atomic<bool>::is_always_lock_free,
              "ReportNotSupported must stay async-signal-safe");

// Zero-initialised (constant-initialised) static storage: usable from any
// constructor or signal handler, no initialisation-order concerns.
std::atomic<bool> g_reported[kDriverSymbolCount];

// Appends s to buf[*len], truncating at cap.
void Append(char* buf, std::size_t cap, std::size_t* len, const char* s) noexcept {
  std::size_t n = std::strlen(s);
  if (n > cap - *len) n = cap - *len;
  std::memcpy(buf + *len, s, n);
  *len += n;
}

void AppendDecimal(char* buf, std::size_t cap, std::size_t* len,
                   std::size_t value) noexcept {
  char digits[24];
  std::size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n > 0 && *len < cap) buf[(*len)++] = digits[--n];
}

void WriteAll(const char* buf, std::size_t len) noexcept {
  while (len > 0) {
    ssize_t w = ::write(STDERR_FILENO, buf, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere to report a failing stderr
    }
    buf += w;
    len -= static_cast<std::size_t>(w);
  }
}

}  // namespace

int ReportNotSupported(std::size_t index) noexcept {
  const bool in_range = index < kDriverSymbolCount;
  if (!in_range ||
      !g_reported[index].exchange(true, std::memory_order_relaxed)) {
    const int saved_errno = errno;
    char msg[256];
    std::size_t len = 0;
    Append(msg, sizeof(msg) - 1, &len, "curelay: ");
    if (in_range) {
      Append(msg, sizeof(msg) - 1, &len, DriverSymbolName(index));
    } else {
      Append(msg, sizeof(msg) - 1, &len, "entry point #");
      AppendDecimal(msg, sizeof(msg) - 1, &len, index);
    }
    Append(msg, sizeof(msg) - 1, &len, " is not supported");
    msg[len++] = '\n';
    WriteAll(msg, len);
    errno = saved_errno;
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace curelay::frontend
