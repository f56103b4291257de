// Endpoints as users write them (ipc://PATH, tcp://HOST:PORT, rdma://HOST:PORT), parsed once: nothing above transport/ looks at the
// scheme's text. A tcp or rdma port may be "*" (any free port) or "LOW-HIGH" (the first free one) where something binds.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace curelay::transport {

struct Endpoint {
  enum class Kind { kIpc, kTcp, kRdma };  // rdma: HOST:PORT is the bootstrap TCP socket of the queue pair
  Kind kind = Kind::kIpc;
  std::string path;  // ipc: the socket's path
  std::string host;  // tcp, rdma
  std::string port;  // tcp, rdma: a number, "*" or "LOW-HIGH"

  static std::optional<Endpoint> Parse(std::string_view text);
  static Endpoint Tcp(std::string host, std::string port) { return {Kind::kTcp, {}, std::move(host), std::move(port)}; }
  static Endpoint Rdma(std::string host, std::string port) {
    return {Kind::kRdma, {}, std::move(host), std::move(port)};
  }
  std::string ToString() const;
  // ipc endpoints are on this host: the directory holding the socket is where files both sides map are made.
  bool same_host() const { return kind == Kind::kIpc; }
  // Where the handshake with a backend listening here goes: an rdma:// backend endpoint takes its handshake (one
  // small request and reply per session) over tcp:// on the same HOST:PORT; the session itself goes over RDMA.
  Endpoint Handshake() const { return kind == Kind::kRdma ? Tcp(host, port) : *this; }
  // The same kind on the same host with another port (an executor's, on the host the client named).
  Endpoint WithPort(std::string other_port) const { return {kind, path, host, std::move(other_port)}; }
  std::string directory() const;
};

// "LOW-HIGH" with 1 <= LOW <= HIGH <= 65535.
std::optional<std::pair<int, int>> ParsePortRange(std::string_view text);

}  // namespace curelay::transport
