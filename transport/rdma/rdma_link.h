// One reliable-connected queue pair and what it needs (device, protection domain, completion queue with its
// completion channel, a registered receive ring and send staging), connected through a small TCP bootstrap
// socket that stays open afterwards so a peer's death is seen at once. RdmaChannel (rdma_channel.cc) frames
// messages over it; tests use it directly to play a misbehaving peer. Internal to transport/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/rdma/verbs_api.h"

namespace curelay::transport {

struct RdmaSettings {
  int timeout_exponent = 20;   // local ACK timeout 4.096 us * 2^20, about 4.3 s per attempt (NCCL_IB_TIMEOUT)
  int retry_count = 7;         // NCCL_IB_RETRY_CNT
  // Credits keep a receive posted for everything a conforming peer sends, so RNR means a broken or hostile peer: the
  // largest finite count (7 would retry forever, and a peer that posts no receives would hang every send) ends the
  // channel after 7 naks, at most 7 x 491 ms (the largest RNR timer a responder can ask for).
  int rnr_retry = 6;
  int min_rnr_timer = 12;      // 0.64 ms
  uint32_t slot_bytes = 64 << 10;
  uint32_t slot_count = 32;
  // The bulk region the peer RDMA-writes large payloads into (a multiple of 4 KiB; 0: none, every payload goes
  // through the slots).
  uint32_t bulk_bytes = 8 << 20;
  int handshake_timeout_ms = 10000;
  int keepalive_timeout_ms = 5000;  // TCP keepalive/user timeout of the bootstrap socket (a vanished host)
  std::string device;          // empty: the first device
  int port = 1;
  int gid_index = -1;          // -1: use the LID on InfiniBand, GID index 0 on Ethernet (RoCE)
};

// ChannelOptions' values, then the environment: CURELAY_RDMA_TIMEOUT, CURELAY_RDMA_RETRY_COUNT,
// CURELAY_RDMA_DEVICE, CURELAY_RDMA_PORT, CURELAY_RDMA_GID_INDEX.
RdmaSettings RdmaSettingsFromEnvironment(RdmaSettings settings);

// What each side tells the other on the bootstrap socket (fixed little-endian layout, both sides x86/arm64).
struct RdmaHello {
  uint32_t magic;
  uint16_t version;
  uint8_t mtu;         // ibv_mtu
  uint8_t is_global;   // 1: address by GID (RoCE / routed IB)
  uint32_t qpn;
  uint32_t psn;
  uint16_t lid;
  uint16_t reserved;
  uint32_t slot_bytes;
  uint8_t gid[16];
  uint64_t ring_address;
  uint32_t ring_rkey;
  uint32_t slot_count;
  uint64_t bulk_address;  // version 2: the bulk region (bulk_bytes 0: none)
  uint32_t bulk_rkey;
  uint32_t bulk_bytes;
};

class RdmaLink {
 public:
  // Client: connects the bootstrap socket to host:port and brings the QP up. Blocks at most the handshake timeout.
  static std::unique_ptr<RdmaLink> Connect(const std::string& host, const std::string& port,
                                           const RdmaSettings& settings, std::string* error);
  // Server: the bootstrap socket is already accepted.
  static std::unique_ptr<RdmaLink> Accept(int socket_fd, const RdmaSettings& settings, std::string* error);
  ~RdmaLink();

  const VerbsApi& verbs() const { return *verbs_; }
  ibv_qp* qp() const { return qp_; }
  ibv_cq* cq() const { return cq_; }
  ibv_comp_channel* completion_channel() const { return completion_channel_; }
  int bootstrap_fd() const { return bootstrap_fd_; }
  uint8_t* ring() const { return ring_; }          // where the peer writes fragments
  uint8_t* staging() const { return staging_; }    // fragments to send are copied here
  uint32_t staging_lkey() const;
  uint8_t* bulk() const { return bulk_; }          // where the peer writes large payloads (settings().bulk_bytes)
  uint8_t* bulk_staging() const { return bulk_staging_; }  // large payloads to send (peer().bulk_bytes)
  uint32_t bulk_staging_lkey() const;
  const RdmaHello& peer() const { return peer_; }
  const RdmaSettings& settings() const { return settings_; }
  uint32_t max_inline() const { return max_inline_; }
  int queue_depth() const { return static_cast<int>(settings_.slot_count) + kExtraWorkRequests; }
  std::string peer_name() const { return peer_name_; }

  // Receive work requests beyond one per ring slot: they take the peer's credit messages.
  static constexpr int kExtraWorkRequests = 16;

 private:
  RdmaLink() = default;
  bool Setup(int socket_fd, const RdmaSettings& settings, std::string* error);

  const VerbsApi* verbs_ = nullptr;
  RdmaSettings settings_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* completion_channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  uint8_t* ring_ = nullptr;
  uint8_t* staging_ = nullptr;
  size_t ring_bytes_ = 0, staging_bytes_ = 0;
  ibv_mr* ring_mr_ = nullptr;
  ibv_mr* staging_mr_ = nullptr;
  uint8_t* bulk_ = nullptr;
  uint8_t* bulk_staging_ = nullptr;
  ibv_mr* bulk_mr_ = nullptr;
  ibv_mr* bulk_staging_mr_ = nullptr;
  int bootstrap_fd_ = -1;
  uint32_t max_inline_ = 0;
  RdmaHello peer_{};
  std::string peer_name_;
};

// wr_id of a posted receive: this bit and the receive's index (send work requests use small numbers).
inline constexpr uint64_t kReceiveWork = uint64_t{1} << 32;

// Immediate data of a fragment write: its length; with kCreditFlag set, a credit message returning that many slots
// (none: a heartbeat).
inline constexpr uint32_t kCreditFlag = 0x80000000u;

}  // namespace curelay::transport
