#include "common/shim_identity.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace curelay {

bool FileCarriesMarker(const std::string& path, const char* marker) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat info {};
  bool found = false;
  if (fstat(fd, &info) == 0 && info.st_size > 0) {
    void* bytes = mmap(nullptr, info.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (bytes != MAP_FAILED) {
      found = memmem(bytes, info.st_size, marker, std::strlen(marker)) != nullptr;
      munmap(bytes, info.st_size);
    }
  }
  close(fd);
  return found;
}

}  // namespace curelay
