// The CUDA IPC registry entries (executor/ipc_registry.cc, schema/control.fbs IpcRegistryEntry): an executor asked
// to open a handle reads the entry file another executor wrote and decides from it whether this session may open
// the handle. The input (whole) is the entry file's content; the harness writes it where the handle's entry lives
// and asks IpcRegistry::MayOpen, for a memory and an event handle.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <spdlog/spdlog.h>

#include "executor/ipc_registry.h"
#include "fuzz/scratch_directory.h"

namespace {

std::string directory;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  directory = curelay::fuzz::MakeScratchDirectory("curelay-ipc-fuzz");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  curelay::executor::IpcRegistry registry;
  registry.Configure(directory, "fuzz-tenant");
  const uint8_t handle[4] = {0xde, 0xad, 0xbe, 0xef};
  for (const char* kind : {"/memory-deadbeef", "/event-deadbeef"}) {
    const std::string path = directory + kind;
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, data, size) != static_cast<ssize_t>(size)) {
      std::perror("ipc_registry_fuzzer: write");
      std::abort();
    }
    close(fd);
  }
  (void)registry.MayOpen(curelay::executor::IpcRegistry::Kind::kMemory, handle);
  (void)registry.MayOpen(curelay::executor::IpcRegistry::Kind::kEvent, handle);
  return 0;
}
