#include "transport/shm/shared_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace curelay::transport {
namespace {

void* MapShared(int fd, size_t bytes, std::string* error, void* address_hint = nullptr) {
  if (address_hint != nullptr) {
    void* placed = mmap(address_hint, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    if (placed == address_hint) return placed;
    if (placed != MAP_FAILED) munmap(placed, bytes);  // an old kernel that took the hint as a hint only
  }
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) {
    *error = std::string("mmap: ") + strerror(errno);
    return nullptr;
  }
  return mapping;
}

}  // namespace

void* CreateSharedFile(const std::string& directory, const char* prefix, size_t bytes, std::string* path,
                       std::string* error) {
  uint64_t nonce = 0;
  if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) nonce = static_cast<uint64_t>(getpid()) << 20;
  char name[96];
  std::snprintf(name, sizeof(name), "/%s-%d-%016llx", prefix, getpid(), static_cast<unsigned long long>(nonce));
  *path = directory + name;
  const int fd = open(path->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    *error = "create " + *path + ": " + strerror(errno);
    return nullptr;
  }
  void* mapping = nullptr;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *error = std::string("ftruncate: ") + strerror(errno);
  } else {
    mapping = MapShared(fd, bytes, error);
  }
  close(fd);
  if (mapping == nullptr) unlink(path->c_str());
  return mapping;
}

void* OpenSharedFile(const std::string& path, const std::string& allowed_directory, const char* prefix, size_t bytes,
                     std::string* error, void* address_hint) {
  const auto slash = path.rfind('/');
  const std::string expected_start = std::string("/") + prefix + "-";
  if (slash == std::string::npos || path.substr(0, slash) != allowed_directory ||
      path.compare(slash, expected_start.size(), expected_start) != 0 || path.find("..") != std::string::npos) {
    *error = "shared file '" + path + "' is not a " + prefix + " file in " + allowed_directory;
    return nullptr;
  }
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    *error = "open " + path + ": " + strerror(errno);
    return nullptr;
  }
  struct stat info {};
  void* mapping = nullptr;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || static_cast<uint64_t>(info.st_size) != bytes) {
    *error = path + " is not a regular file of the expected size";
  } else {
    mapping = MapShared(fd, bytes, error, address_hint);
  }
  close(fd);
  unlink(path.c_str());  // both sides hold the mapping; the name is no longer needed
  return mapping;
}

bool MoveMapping(void* mapping, size_t bytes, void* target) {
  if (mapping == target) return true;
  // Reserving the range first is what keeps mremap's MREMAP_FIXED from replacing a mapping already there.
  void* reserved = mmap(target, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                        -1, 0);
  if (reserved == MAP_FAILED) return false;
  if (reserved != target) {  // an old kernel that took the address as a hint only
    munmap(reserved, bytes);
    return false;
  }
  if (mremap(mapping, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, target) == MAP_FAILED) {
    munmap(reserved, bytes);
    return false;
  }
  return true;
}

void* CreateNamedSharedFile(const std::string& path, size_t bytes, std::string* error) {
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *error = path + ": " + strerror(errno);
    if (fd >= 0) close(fd);
    return nullptr;
  }
  void* mapping = MapShared(fd, bytes, error);
  close(fd);
  return mapping;
}

void* OpenNamedSharedFile(const std::string& path, size_t bytes, std::string* error) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  struct stat info {};
  if (fd < 0 || fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || static_cast<size_t>(info.st_size) != bytes) {
    *error = path + ": " + (fd < 0 ? strerror(errno) : "not a regular file of the expected size");
    if (fd >= 0) close(fd);
    return nullptr;
  }
  void* mapping = MapShared(fd, bytes, error);
  close(fd);
  return mapping;
}

}  // namespace curelay::transport
