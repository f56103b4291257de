// The oldest glibc the shims (libcuda.so.1, libnvidia-ml.so.1) run on is 2.35 (Ubuntu 22.04's, the base of most
// CUDA and PyTorch images), although they are built on Debian 12's 2.36. The one 2.36 symbol they would need comes
// from the static libstdc++ of GCC 12, whose std::random_device references arc4random; defining it here (hidden,
// never exported) binds that reference inside each shim, so the dynamic linker never asks the application's glibc. tools/check-shim.sh enforces the floor.
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random(void) {
  uint32_t value = 0;
  for (;;) {
    const ssize_t got = getrandom(&value, sizeof value, 0);
    if (got == static_cast<ssize_t>(sizeof value)) return value;
    if (got < 0 && errno != EINTR) break;  // ENOSYS on kernels before 3.17: read the device instead
  }
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t got = read(fd, &value, sizeof value);
    close(fd);
    if (got == static_cast<ssize_t>(sizeof value)) return value;
  }
  std::abort();  // glibc's arc4random aborts too when no randomness can be had
}
