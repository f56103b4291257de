// ConnectChannel/BindChannel: the one place where an endpoint's scheme picks the transport.
#include "transport/channel.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include "transport/endpoint.h"
#include "transport/first_peer_channel.h"
#include "transport/rdma/rdma_channel.h"
#include "transport/zmq/zmq_channel.h"
#include "transport/zmq/zmq_curve.h"

namespace curelay::transport {

std::unique_ptr<Channel> ConnectChannel(const std::string& endpoint, const ChannelOptions& options,
                                        std::string* error) {
  const auto parsed = Endpoint::Parse(endpoint);
  if (parsed && parsed->kind == Endpoint::Kind::kRdma) return ConnectRdmaChannel(*parsed, options, error);
  return ConnectZmqChannel(endpoint, options, error);
}

std::unique_ptr<Channel> BindChannel(std::span<const std::string> endpoints, const ChannelOptions& options,
                                     std::string* error) {
  // ZeroMQ binds its ipc and tcp endpoints on one socket; each rdma endpoint is a queue pair's listener of its own.
  std::vector<std::string> zmq_endpoints;
  std::vector<std::unique_ptr<Channel>> candidates;
  for (const auto& endpoint : endpoints) {
    const auto parsed = Endpoint::Parse(endpoint);
    if (!parsed || parsed->kind != Endpoint::Kind::kRdma) {
      zmq_endpoints.push_back(endpoint);
      continue;
    }
    std::unique_ptr<Channel> rdma = BindRdmaChannel(*parsed, options, error);
    if (rdma == nullptr) return nullptr;
    candidates.push_back(std::move(rdma));
  }
  // A ZeroMQ socket's security is the socket's, not an endpoint's: with CURVE, tcp endpoints get a socket of their
  // own and ipc keeps a plain one (the file system guards it).
  std::vector<std::string> curve_endpoints;
  if (options.curve.enabled()) {
    const auto tcp = std::stable_partition(zmq_endpoints.begin(), zmq_endpoints.end(),
                                           [](const std::string& endpoint) { return !CurveApplies(endpoint); });
    curve_endpoints.assign(tcp, zmq_endpoints.end());
    zmq_endpoints.erase(tcp, zmq_endpoints.end());
  }
  for (const auto* group : {&curve_endpoints, &zmq_endpoints}) {
    if (group->empty()) continue;
    std::unique_ptr<Channel> zmq = BindZmqChannel(*group, options, error);
    if (zmq == nullptr) return nullptr;
    candidates.insert(candidates.begin(), std::move(zmq));
  }
  if (candidates.empty()) {
    *error = "no endpoint to bind";
    return nullptr;
  }
  if (candidates.size() == 1) return std::move(candidates[0]);
  // One peer per session, on whichever transport it comes.
  return std::make_unique<FirstPeerChannel>(
      std::vector<std::shared_ptr<Channel>>(std::make_move_iterator(candidates.begin()),
                                            std::make_move_iterator(candidates.end())));
}

}  // namespace curelay::transport
