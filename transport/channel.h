// The transport interface: everything above it (shim, backend, executor) sends and receives protocol messages
// through these few calls, so a transport (ZeroMQ, shared memory, RDMA) is one implementation of this header.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "transport/frame.h"

namespace curelay::transport {

enum class ReceiveStatus { kMessage, kTimeout, kPeerLost, kError };

// One received protocol message: a header frame (FlatBuffers) and an optional payload frame.
struct IncomingMessage {
  Frame header;
  Frame payload;
};

// Memory a receiver lends a channel for the payloads it receives, where the receiver has a use for owning it: the
// executor maps each buffer a second time and page-locks that view, so a host-to-device copy is one DMA from where
// the payload landed (executor/receive_buffers.h). Called from the channel's threads.
class ReceiveMemory {
 public:
  virtual ~ReceiveMemory() = default;
  // `bytes` of writable memory, or nullptr (the channel then uses its own).
  virtual uint8_t* Allocate(size_t bytes) = 0;
  // Memory from Allocate that the channel no longer uses.
  virtual void Free(uint8_t* memory, size_t bytes) = 0;
};

// A connected, ordered, reliable message channel to exactly one peer. Not thread-safe: callers serialize.
class Channel {
 public:
  virtual ~Channel() = default;
  // Queues one message; returns false when the channel is broken. `payload` may be empty.
  virtual bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) = 0;
  // Like Send, but the channel may go on reading `payload` after it returns, until it calls `returned` (exactly
  // once, from any thread, also when the message is never sent). Channels that copy the payload call it at once.
  // `placement_key` names the payload for a peer that asked for it to land in place (ExpectPayload); 0: none.
  virtual bool SendLoaned(std::span<const uint8_t> header, std::span<const uint8_t> payload,
                          std::function<void()> returned, uint64_t placement_key) {
    (void)placement_key;
    const bool sent = Send(header, payload);
    returned();
    return sent;
  }
  // Receiving side: the payload the peer will send under `key` (non-zero) belongs at `destination` (exactly
  // `bytes` long). A channel that can receive it there does, and the message's payload frame then points at
  // `destination` itself, so the caller has nothing to copy; others ignore this. Called before the request that
  // causes the payload goes out. Unlike the calls above, these three may be called from any thread at any time.
  // Returns whether the payload will be at `destination` when its message is taken (false: the caller copies it).
  // Expected payloads whose destinations overlap keep the order of their keys (a later key is there last).
  virtual bool ExpectPayload(uint64_t key, uint8_t* destination, size_t bytes) {
    (void)key;
    (void)destination;
    (void)bytes;
    return false;
  }
  // Withdraws an ExpectPayload whose payload did not come in place (an error reply, a payload small enough to
  // travel inline). On return nothing writes to its destination any more.
  virtual void ForgetPayload(uint64_t key) { (void)key; }
  // Withdraws every ExpectPayload (the session broke: the application may free those buffers next).
  virtual void ForgetAllPayloads() {}
  // Payloads received from now on may land in memory from `memory`: a channel that keeps buffers of its own for
  // received payloads (tcp lanes) takes them from it; others ignore it. The channel keeps `memory` alive.
  virtual void UseReceiveMemory(std::shared_ptr<ReceiveMemory> memory) { (void)memory; }
  // How many payloads the channel moves at once (tcp lanes: one per lane; others: 1). One payload alone on one TCP
  // connection moves at a fraction of the lanes' joint rate (on the H200: 1 MiB alone 400 us, as four payloads of
  // 256 KiB on four lanes 105 us), so a sender of one large piece of data does better to split it.
  virtual size_t ParallelPayloads() const { return 1; }
  // timeout_ms < 0 waits until a message arrives or the peer is lost.
  virtual ReceiveStatus Receive(IncomingMessage& message, int timeout_ms) = 0;
  // True once the peer has gone (process exit, closed connection). Final.
  virtual bool PeerLost() = 0;
  // True once a peer has connected at least once (the executor uses it to tell "not yet" from "gone").
  virtual bool PeerSeen() = 0;
  // True when Send and Receive may run at the same time on different threads (one of each at most). Otherwise
  // callers must serialize every operation.
  virtual bool FullDuplex() const { return false; }
  // Sleeps until the channel may have something to receive, or timeout_ms passes. Touches no channel state, so
  // it may run while another thread sends (which is how a half-duplex channel is shared without a lock held
  // across a wait).
  virtual void AwaitActivity(int timeout_ms) = 0;
  // The endpoints this side is bound to (executor side), e.g. "ipc:///run/x.sock", "tcp://0.0.0.0:41234".
  virtual std::string BoundEndpoint(std::string_view scheme) const = 0;
};

// ZeroMQ's CURVE (encryption, and authentication by long-term keys) on tcp:// sockets; no keys: plaintext. Keys
// are Z85 text, 40 characters. ipc:// and the shared-memory channel stay as they are (the file system guards them);
// rdma:// session traffic is not encrypted (its handshake with the backend, over tcp, is). docs/security.md.
struct CurveKeys {
  std::string server_public;  // the backend's long-term key, which its executors share
  std::string server_secret;  // servers only (the backend's listeners, executors)
  std::string client_public;  // clients only: an ephemeral pair per process, which executors let in by its public
  std::string client_secret;  // half (ZAP, transport/zmq/zmq_curve.h)
  bool enabled() const { return !server_public.empty(); }
  bool server() const { return !server_secret.empty(); }
};

struct ChannelOptions {
  int spin_microseconds = 100;   // busy-poll for a reply this long before sleeping: trades CPU for latency
  int max_message_bytes = 0;     // 0: no transport-level limit (the protocol layer enforces its own)
  // A peer silent this long (no data, no heartbeat answer) is lost: a cut link or a frozen host ends the session
  // instead of hanging it. Heartbeats go out every third of it (at most every second).
  int heartbeat_timeout_ms = 5000;
  // rdma:// only (NCCL's defaults; CURELAY_RDMA_TIMEOUT and CURELAY_RDMA_RETRY_COUNT override): the local ACK
  // timeout is 4.096 us * 2^exponent per attempt, and a peer that acknowledges nothing for retry_count + 1 of
  // them is lost.
  int rdma_timeout_exponent = 20;
  int rdma_retry_count = 7;
  CurveKeys curve;  // applied to tcp:// endpoints only
  // tcp://: TCP connections ("lanes", sealed under CURVE) that carry a session's large payloads beside its ZeroMQ
  // channel (transport/lanes/lanes_channel.h). Clients: how many to offer (0: none; negative: the default, 4 plain
  // or 8 sealed). Executors: the ports their listener may take ("LOW-HIGH": the first free one; empty or "*": any).
  int tcp_lanes = 0;
  std::string lane_ports;
};

// Client side of a session: connects to one executor endpoint.
std::unique_ptr<Channel> ConnectChannel(const std::string& endpoint, const ChannelOptions& options,
                                        std::string* error);
// Executor side: binds every endpoint given (e.g. an ipc path, a tcp wildcard and an rdma port range: the first
// free port in it) and serves one peer, on whichever of them it comes (the first to send anything).
std::unique_ptr<Channel> BindChannel(std::span<const std::string> endpoints, const ChannelOptions& options,
                                     std::string* error);

// One-shot request/reply used for the handshake with the backend. Returns the reply header bytes, or empty on
// failure with `error` set; never waits longer than timeout_ms.
std::string RequestOnce(const std::string& endpoint, std::span<const uint8_t> request, int timeout_ms,
                        std::string* error, const CurveKeys& curve = {});

}  // namespace curelay::transport
