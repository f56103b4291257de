// A "host:port" listen address, as an operator writes it in the configuration: "127.0.0.1:9400",
// "0.0.0.0:9400", "localhost:9400", or "[::1]:9400" for an IPv6 literal.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace curelay::backend {

struct ListenAddress {
  std::string host;  // without brackets: ready for getaddrinfo
  int port = 0;      // 0..65535; 0 asks the kernel for a free port
};

// Parses `text`; on failure returns nothing and says why in `*error`. The host may not be empty: the metrics
// endpoint is unauthenticated, so exposing it on every interface has to be spelled out ("0.0.0.0").
std::optional<ListenAddress> ParseListenAddress(std::string_view text, std::string* error);

// The address as text again, bracketing an IPv6 host: for messages.
std::string FormatListenAddress(const std::string& host, int port);

}  // namespace curelay::backend
