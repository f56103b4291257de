// ConnectChannel/BindChannel: the one place where an endpoint's scheme picks the transport.
#include "transport/channel.h"
#include "transport/endpoint.h"
#include "transport/rdma/rdma_channel.h"
#include "transport/zmq/zmq_channel.h"

namespace curelay::transport {

std::unique_ptr<Channel> ConnectChannel(const std::string& endpoint, const ChannelOptions& options,
                                        std::string* error) {
  const auto parsed = Endpoint::Parse(endpoint);
  if (parsed && parsed->kind == Endpoint::Kind::kRdma) return ConnectRdmaChannel(*parsed, options, error);
  return ConnectZmqChannel(endpoint, options, error);
}

std::unique_ptr<Channel> BindChannel(std::span<const std::string> endpoints, const ChannelOptions& options,
                                     std::string* error) {
  size_t rdma = 0;
  for (const auto& endpoint : endpoints) {
    const auto parsed = Endpoint::Parse(endpoint);
    if (parsed && parsed->kind == Endpoint::Kind::kRdma) ++rdma;
  }
  if (rdma == 0) return BindZmqChannel(endpoints, options, error);
  // One channel serves one peer over one transport: an rdma endpoint is bound alone.
  if (rdma != 1 || endpoints.size() != 1) {
    *error = "an rdma:// endpoint must be the only endpoint a channel binds";
    return nullptr;
  }
  return BindRdmaChannel(*Endpoint::Parse(endpoints[0]), options, error);
}

}  // namespace curelay::transport
