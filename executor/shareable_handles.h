// Shareable handles between sessions of this host (cuMemExportToShareableHandle / cuMemImportFromShareableHandle
// with POSIX file descriptors; docs/architecture.md, "Shareable handles"). The driver's descriptor lives in the
// exporting executor; what the application gets is a token naming it (the shim wraps it in a descriptor of its own),
// and an importing executor fetches the real descriptor from the exporter over a Unix socket in the backend's
// registry directory (owner-only, never mounted into clients), after IpcRegistry has checked the token's scope.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace curelay::executor {

class ShareableHandleServer {
 public:
  static constexpr size_t kTokenBytes = 16;
  using Token = std::array<uint8_t, kTokenBytes>;

  // `directory` empty: shareable handles are off.
  void Configure(std::string directory) { directory_ = std::move(directory); }
  bool enabled() const { return !directory_.empty(); }

  // Keeps `fd` (the driver's export of `owner`, an allocation or pool) under a fresh random token and serves it,
  // with `bytes` (the memory an importer is charged for), to this host's executors from then on. Takes `fd` in
  // every case; false (logged) when it cannot be served.
  bool Add(int fd, uint64_t owner, uint64_t bytes, Token* token);
  // The token of `owner`'s descriptor if it was exported before (the driver would answer a new descriptor to the
  // same memory; one is enough to serve every importer).
  bool Find(uint64_t owner, Token* token) const;
  // `owner` is released: its descriptor is closed and no longer served.
  void Withdraw(uint64_t owner);
  void WithdrawAll();

  // Asks the executor `exporter` (its server in `directory`) for the descriptor behind `token`: a descriptor the
  // caller owns and its `bytes`, or -1 (logged) when none is served under that token or the exporter does not
  // answer in time.
  static int Fetch(const std::string& directory, pid_t exporter, const Token& token, uint64_t* bytes);

  ~ShareableHandleServer();

 private:
  static std::string SocketPath(const std::string& directory, pid_t pid);
  bool StartLocked();  // binds the socket and starts the serving thread, once
  // What an importer reads back: whether the token is served (the descriptor rides along) and its size.
  struct Answer {
    uint8_t found;
    uint8_t padding[7];
    uint64_t bytes;
  };
  void Serve(int listener, int stop);
  void AnswerImporter(int connection);

  std::string directory_;
  mutable std::mutex mutex_;  // guards the maps (the serving thread reads them)
  struct Served {
    int fd;
    uint64_t bytes;
  };
  std::map<Token, Served> descriptors_;
  std::map<uint64_t, Token> owners_;
  int listener_ = -1;
  int stop_[2] = {-1, -1};  // a pipe: its write end wakes the serving thread to end
  std::thread thread_;
};

}  // namespace curelay::executor
