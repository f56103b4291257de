// A Channel over shared memory, for sessions whose client and executor share a host (ipc:// endpoints): two
// ShmRings in one file, one per direction. The ZeroMQ channel the session started on stays open underneath, only
// to tell when the peer is gone.
#pragma once

#include <memory>
#include <string>

#include "transport/channel.h"

namespace curelay::transport {

inline constexpr uint64_t kShmRingBytes = uint64_t{32} << 20;

// Client side: creates the shared file in `directory` (the executor's socket directory) and returns a channel
// that sends on ring 0 and receives on ring 1. `path` receives the file's path for the executor.
std::unique_ptr<Channel> CreateShmChannel(std::shared_ptr<Channel> liveness, const std::string& directory,
                                          const ChannelOptions& options, std::string* path, std::string* error);

// Executor side: opens the client's file, which must be a regular file directly inside `allowed_directory` with the
// expected size, maps it and unlinks it.
std::unique_ptr<Channel> OpenShmChannel(std::shared_ptr<Channel> liveness, const std::string& path,
                                        const std::string& allowed_directory, const ChannelOptions& options,
                                        std::string* error);

}  // namespace curelay::transport
