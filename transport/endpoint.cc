#include "transport/endpoint.h"

#include <charconv>

namespace curelay::transport {
namespace {

std::optional<int> ParsePort(std::string_view text) {
  int port = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (error != std::errc() || end != text.data() + text.size() || port < 1 || port > 65535) return std::nullopt;
  return port;
}

}  // namespace

std::optional<std::pair<int, int>> ParsePortRange(std::string_view text) {
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const auto low = ParsePort(text.substr(0, dash)), high = ParsePort(text.substr(dash + 1));
  if (!low || !high || *low > *high) return std::nullopt;
  return std::make_pair(*low, *high);
}

std::optional<Endpoint> Endpoint::Parse(std::string_view text) {
  if (text.rfind("ipc://", 0) == 0) {
    if (text.size() == 6) return std::nullopt;
    return Endpoint{Kind::kIpc, std::string(text.substr(6)), {}, {}};
  }
  const bool tcp = text.rfind("tcp://", 0) == 0, rdma = text.rfind("rdma://", 0) == 0;
  if (tcp || rdma) {
    const std::string_view rest = text.substr(tcp ? 6 : 7);
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    const std::string_view port = rest.substr(colon + 1);
    if (port != "*" && !ParsePort(port) && !ParsePortRange(port)) return std::nullopt;
    return Endpoint{tcp ? Kind::kTcp : Kind::kRdma, {}, std::string(rest.substr(0, colon)), std::string(port)};
  }
  return std::nullopt;
}

std::string Endpoint::ToString() const {
  switch (kind) {
    case Kind::kIpc: return "ipc://" + path;
    case Kind::kTcp: return "tcp://" + host + ":" + port;
    case Kind::kRdma: return "rdma://" + host + ":" + port;
  }
  return {};
}

std::string Endpoint::directory() const {
  if (kind != Kind::kIpc) return {};
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

}  // namespace curelay::transport
