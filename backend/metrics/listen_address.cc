#include "backend/metrics/listen_address.h"

#include <charconv>
#include <system_error>

namespace curelay::backend {

std::optional<ListenAddress> ParseListenAddress(std::string_view text, std::string* error) {
  const std::string quoted = "listen address \"" + std::string(text) + "\"";
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      *error = quoted + ": expected [ipv6]:port";
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      *error = quoted + ": expected host:port";
      return std::nullopt;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      *error = quoted + ": an IPv6 host needs brackets, as in [::1]:9400";
      return std::nullopt;
    }
  }
  if (host.empty()) {
    *error = quoted + ": the host is empty (write 0.0.0.0 to listen on every interface)";
    return std::nullopt;
  }
  int number = -1;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || number < 0 || number > 65535) {
    *error = quoted + ": the port must be a number from 0 to 65535";
    return std::nullopt;
  }
  return ListenAddress{std::string(host), number};
}

std::string FormatListenAddress(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace curelay::backend
