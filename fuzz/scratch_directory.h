// A private directory for the files a harness shares with itself (boards, rings, registry entries): in /dev/shm
// when there is one, since these files are rewritten for every input and a disk-backed /tmp makes that slow.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace curelay::fuzz {

inline std::string MakeScratchDirectory(const char* name) {
  const std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string pattern = base + "/" + name + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  return pattern;
}

}  // namespace curelay::fuzz
