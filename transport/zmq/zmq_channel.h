// The ZeroMQ channel (ipc://, tcp://), reached through ConnectChannel/BindChannel (channel_seam.cc).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "transport/channel.h"

namespace curelay::transport {

std::unique_ptr<Channel> ConnectZmqChannel(const std::string& endpoint, const ChannelOptions& options,
                                           std::string* error);
std::unique_ptr<Channel> BindZmqChannel(std::span<const std::string> endpoints, const ChannelOptions& options,
                                        std::string* error);

}  // namespace curelay::transport
