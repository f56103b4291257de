#include "executor/driver.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/shim_identity.h"

namespace curelay::executor {
namespace {

#define CURELAY_STRINGIFY_EXPANDED(name) #name
#define CURELAY_ABI_NAME(name) CURELAY_STRINGIFY_EXPANDED(name)

// The shim carries a marker string in its read-only data. Looking for it in the file (rather than loading the
// library and asking it) keeps the shim's constructors from ever running inside an executor.
bool FileIsShim(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat info {};
  bool found = false;
  if (fstat(fd, &info) == 0 && info.st_size > 0) {
    void* bytes = mmap(nullptr, info.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (bytes != MAP_FAILED) {
      found = memmem(bytes, info.st_size, kShimIdentity, sizeof(kShimIdentity) - 1) != nullptr;
      munmap(bytes, info.st_size);
    }
  }
  close(fd);
  return found;
}

}  // namespace

bool Driver::Load(const std::string& path, std::string* error) {
  if (FileIsShim(path)) {
    *error = path + " is the curelay shim, not a CUDA driver; refusing to load it";
    return false;
  }
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    *error = std::string("dlopen: ") + dlerror();
    return false;
  }
#define CURELAY_DRIVER_FUNCTION(name)                                                   \
  name = reinterpret_cast<decltype(name)>(dlsym(handle_, CURELAY_ABI_NAME(name)));      \
  if (name == nullptr) {                                                                \
    *error = path + " lacks " CURELAY_ABI_NAME(name);                                   \
    return false;                                                                       \
  }
#include "executor/driver_functions.inc"
#undef CURELAY_DRIVER_FUNCTION
#define CURELAY_DRIVER_FUNCTION(name) \
  name = reinterpret_cast<decltype(name)>(dlsym(handle_, CURELAY_ABI_NAME(name)));
#include "executor/driver_functions_optional.inc"
#undef CURELAY_DRIVER_FUNCTION
  return true;
}

}  // namespace curelay::executor
