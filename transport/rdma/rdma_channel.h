// A Channel over one reliable-connected RDMA queue pair (rdma://HOST:PORT). Messages are cut into fragments that
// are RDMA-written with immediate data into the peer's registered receive ring, one slot each; the receiver
// returns slots as credits, so a fragment always finds a slot and a posted receive. Reached only through
// ConnectChannel/BindChannel: nothing above transport/ includes this header.
#pragma once

#include <memory>
#include <string>

#include "transport/channel.h"
#include "transport/endpoint.h"

namespace curelay::transport {

// Client side: connects the bootstrap socket to the endpoint's host and port and brings the queue pair up.
std::unique_ptr<Channel> ConnectRdmaChannel(const Endpoint& endpoint, const ChannelOptions& options,
                                            std::string* error);
// Executor side: listens on the endpoint's TCP port (a number, "*" or "LOW-HIGH"); the one peer is accepted
// from Receive/PeerSeen/AwaitActivity, so binding never blocks. BoundEndpoint("rdma") names the port bound.
std::unique_ptr<Channel> BindRdmaChannel(const Endpoint& endpoint, const ChannelOptions& options,
                                         std::string* error);

}  // namespace curelay::transport
