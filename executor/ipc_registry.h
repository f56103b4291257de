// The executor's side of CUDA IPC between sessions (docs/architecture.md, "CUDA IPC"). The real driver shares
// memory and events between the executors of one host; this registry decides which session may open a handle.
// An executor publishes each handle its session exports as a file named after the handle in the backend's
// registry directory (owner-only, never mounted into clients), holding the session's scope (its tenant); an
// executor opens a handle only when its file exists and names its own scope, so one tenant cannot open another
// tenant's memory even with the handle's bytes in hand. Files are withdrawn when the memory or event goes away and
// when the session ends.
#pragma once

#include <cuda.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <span>
#include <string>

namespace curelay::executor {

class IpcRegistry {
 public:
  // kShareable: a token of executor/shareable_handles.h (a file descriptor export), not a driver handle.
  enum class Kind { kMemory, kEvent, kShareable };

  // `directory` empty: CUDA IPC is off (every call answers CUDA_ERROR_NOT_SUPPORTED).
  void Configure(std::string directory, std::string scope);
  bool enabled() const { return !directory_.empty(); }

  // Records that this session exported `handle`; `owner` (a device address or an event id) withdraws it later.
  // Returns false (and logs why) when the file cannot be written.
  bool Publish(Kind kind, std::span<const uint8_t> handle, uint64_t owner);
  // Whether `handle` was published by a live session of this session's scope (that session's executor in
  // `exporter` when given). Logs each refusal and why.
  bool MayOpen(Kind kind, std::span<const uint8_t> handle, pid_t* exporter = nullptr) const;
  const std::string& directory() const { return directory_; }
  // The memory or event `owner` is gone: its handles no longer open anywhere new.
  void Withdraw(Kind kind, uint64_t owner);
  void WithdrawAll();

  ~IpcRegistry() { WithdrawAll(); }

 private:
  std::string PathOf(Kind kind, std::span<const uint8_t> handle) const;

  std::string directory_;
  std::string scope_;
  std::multimap<std::pair<int, uint64_t>, std::string> published_;  // (kind, owner) -> file
};

}  // namespace curelay::executor
