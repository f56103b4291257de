#include "executor/ipc_registry.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "backend/executor_control.h"
#include "control_generated.h"

namespace curelay::executor {
namespace {

// An entry is a few dozen bytes; anything much larger is not one of ours.
constexpr size_t kMaxEntryBytes = 4096;

bool ReadFile(const std::string& path, std::vector<uint8_t>* bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  bytes->resize(kMaxEntryBytes + 1);
  size_t filled = 0;
  for (;;) {
    const ssize_t got = read(fd, bytes->data() + filled, bytes->size() - filled);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    filled += static_cast<size_t>(got);
    if (filled == bytes->size()) break;
  }
  close(fd);
  bytes->resize(filled);
  return filled > 0 && filled <= kMaxEntryBytes;
}

}  // namespace

void IpcRegistry::Configure(std::string directory, std::string scope) {
  directory_ = std::move(directory);
  scope_ = std::move(scope);
}

std::string IpcRegistry::PathOf(Kind kind, std::span<const uint8_t> handle) const {
  static const char kHex[] = "0123456789abcdef";
  static const char* const kPrefixes[] = {"/memory-", "/event-", "/shareable-"};
  std::string path = directory_ + kPrefixes[static_cast<int>(kind)];
  for (const uint8_t byte : handle) {
    path.push_back(kHex[byte >> 4]);
    path.push_back(kHex[byte & 15]);
  }
  return path;
}

bool IpcRegistry::Publish(Kind kind, std::span<const uint8_t> handle, uint64_t owner) {
  if (!enabled()) return false;
  const std::string path = PathOf(kind, handle);
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(control::CreateIpcRegistryEntry(builder, backend::kControlVersion, builder.CreateString(scope_),
                                                 static_cast<uint32_t>(getpid())));
  // Written under a temporary name and renamed, so a reader sees a whole entry or none.
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  bool written = fd >= 0 && write(fd, builder.GetBufferPointer(), builder.GetSize()) ==
                                static_cast<ssize_t>(builder.GetSize());
  if (fd >= 0) close(fd);
  written = written && rename(temporary.c_str(), path.c_str()) == 0;
  if (!written) {
    spdlog::warn("cannot publish a CUDA IPC handle in {}: {}", directory_, strerror(errno));
    unlink(temporary.c_str());
    return false;
  }
  const auto key = std::make_pair(static_cast<int>(kind), owner);
  for (auto [it, end] = published_.equal_range(key); it != end; ++it) {
    if (it->second == path) return true;  // exported again: the driver gives the same handle
  }
  published_.emplace(key, path);
  return true;
}

bool IpcRegistry::MayOpen(Kind kind, std::span<const uint8_t> handle, pid_t* exporter_pid) const {
  if (!enabled()) return false;
  std::vector<uint8_t> bytes;
  if (!ReadFile(PathOf(kind, handle), &bytes)) {
    static const char* const kNames[] = {"memory", "event", "shareable"};
    spdlog::info("refused to open a CUDA IPC {} handle no session of this host published",
                 kNames[static_cast<int>(kind)]);
    return false;
  }
  // The whole buffer is verified (its root offset too: a file shorter than one was read past its end before).
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  const auto* entry = verifier.VerifyBuffer<control::IpcRegistryEntry>(nullptr)
                          ? flatbuffers::GetRoot<control::IpcRegistryEntry>(bytes.data())
                          : nullptr;
  if (entry == nullptr || entry->version() != backend::kControlVersion || entry->scope() == nullptr) {
    spdlog::warn("refused to open a CUDA IPC handle: its registry entry is malformed");
    return false;
  }
  // A process id, never 0 or negative: kill(-1, 0) succeeds, which made such an entry look alive forever.
  const auto exporter = static_cast<pid_t>(entry->exporter_pid());
  if (exporter <= 0 || (kill(exporter, 0) != 0 && errno == ESRCH)) {
    spdlog::info("refused to open a CUDA IPC handle: the session that exported it has ended");
    return false;
  }
  if (entry->scope()->str() != scope_) {
    spdlog::warn("refused to open a CUDA IPC handle exported by another tenant's session");
    return false;
  }
  if (exporter_pid != nullptr) *exporter_pid = exporter;
  return true;
}

void IpcRegistry::Withdraw(Kind kind, uint64_t owner) {
  const auto [begin, end] = published_.equal_range(std::make_pair(static_cast<int>(kind), owner));
  for (auto it = begin; it != end; ++it) unlink(it->second.c_str());
  published_.erase(begin, end);
}

void IpcRegistry::WithdrawAll() {
  for (const auto& [key, path] : published_) unlink(path.c_str());
  published_.clear();
}

}  // namespace curelay::executor
