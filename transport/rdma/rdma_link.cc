#include "transport/rdma/rdma_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace curelay::transport {
namespace {

constexpr uint32_t kHelloMagic = 0x52444d41;  // "RDMA"
constexpr uint16_t kHelloVersion = 2;  // 2: the bulk region
constexpr uint32_t kMaxBulkBytes = 256u << 20, kBulkAlignment = 4096;
constexpr uint32_t kMinSlotBytes = 4096, kMaxSlotBytes = 1u << 20, kMinSlots = 2, kMaxSlots = 1024;
constexpr uint32_t kInlineWanted = 128;

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

bool Transfer(int fd, void* bytes, size_t size, bool sending, Clock::time_point deadline, std::string* error) {
  auto* cursor = static_cast<uint8_t*>(bytes);
  while (size > 0) {
    struct pollfd item = {fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    const int ready = poll(&item, 1, RemainingMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      *error = ready == 0 ? "bootstrap handshake timed out" : std::string("poll: ") + strerror(errno);
      return false;
    }
    const ssize_t done = sending ? send(fd, cursor, size, MSG_NOSIGNAL) : recv(fd, cursor, size, 0);
    if (done < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (done <= 0) {
      *error = done == 0 ? "bootstrap connection closed during the handshake"
                         : std::string("bootstrap socket: ") + strerror(errno);
      return false;
    }
    cursor += done;
    size -= static_cast<size_t>(done);
  }
  return true;
}

void ConfigureBootstrapSocket(int fd, int keepalive_timeout_ms) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  // A host that vanishes without closing the socket (power, cable) is noticed within about the timeout.
  const int idle_s = std::max(1, keepalive_timeout_ms / 3000), interval_s = idle_s, count = 2;
  const unsigned user_timeout_ms = static_cast<unsigned>(std::max(1000, keepalive_timeout_ms));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

int ConnectTcp(const std::string& host, const std::string& port, Clock::time_point deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (status != 0) {
    *error = "resolve " + host + ": " + gai_strerror(status);
    return -1;
  }
  int fd = -1;
  for (addrinfo* address = found; address != nullptr && fd < 0; address = address->ai_next) {
    fd = socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, address->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, address->ai_addr, address->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *error = std::string("connect: ") + strerror(errno);
      close(fd);
      fd = -1;
      continue;
    }
    struct pollfd item = {fd, POLLOUT, 0};
    int socket_error = 0;
    socklen_t length = sizeof(socket_error);
    if (poll(&item, 1, RemainingMs(deadline)) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &socket_error, &length) != 0 || socket_error != 0) {
      *error = "connect " + host + ":" + port + ": " + (socket_error != 0 ? strerror(socket_error) : "timed out");
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

int EnvironmentInt(const char* name, int fallback) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = strtol(text, &end, 10);
  return *end == '\0' ? static_cast<int>(value) : fallback;
}

void* AllocatePages(size_t bytes) {
  void* memory = nullptr;
  if (posix_memalign(&memory, 4096, bytes) != 0) return nullptr;
  std::memset(memory, 0, bytes);
  return memory;
}

}  // namespace

RdmaSettings RdmaSettingsFromEnvironment(RdmaSettings settings) {
  settings.timeout_exponent = std::clamp(EnvironmentInt("CURELAY_RDMA_TIMEOUT", settings.timeout_exponent), 1, 31);
  settings.retry_count = std::clamp(EnvironmentInt("CURELAY_RDMA_RETRY_COUNT", settings.retry_count), 0, 7);
  settings.port = EnvironmentInt("CURELAY_RDMA_PORT", settings.port);
  settings.gid_index = EnvironmentInt("CURELAY_RDMA_GID_INDEX", settings.gid_index);
  if (const char* device = getenv("CURELAY_RDMA_DEVICE"); device != nullptr && *device != '\0') {
    settings.device = device;
  }
  return settings;
}

std::unique_ptr<RdmaLink> RdmaLink::Connect(const std::string& host, const std::string& port,
                                            const RdmaSettings& settings, std::string* error) {
  const int fd = ConnectTcp(host, port, Clock::now() + std::chrono::milliseconds(settings.handshake_timeout_ms),
                            error);
  if (fd < 0) return nullptr;
  std::unique_ptr<RdmaLink> link(new RdmaLink());
  link->peer_name_ = host + ":" + port;
  if (!link->Setup(fd, settings, error)) return nullptr;
  return link;
}

std::unique_ptr<RdmaLink> RdmaLink::Accept(int socket_fd, const RdmaSettings& settings, std::string* error) {
  std::unique_ptr<RdmaLink> link(new RdmaLink());
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  char name[INET6_ADDRSTRLEN] = "?";
  if (getpeername(socket_fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    const void* raw = address.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&address)->sin_addr);
    inet_ntop(address.ss_family, raw, name, sizeof(name));
  }
  link->peer_name_ = name;
  if (!link->Setup(socket_fd, settings, error)) return nullptr;
  return link;
}

bool RdmaLink::Setup(int socket_fd, const RdmaSettings& settings, std::string* error) {
  bootstrap_fd_ = socket_fd;
  settings_ = settings;
  ConfigureBootstrapSocket(bootstrap_fd_, settings.keepalive_timeout_ms);
  const auto deadline = Clock::now() + std::chrono::milliseconds(settings.handshake_timeout_ms);
  verbs_ = LoadVerbsApi(error);
  if (verbs_ == nullptr) return false;
  auto fail = [&](const std::string& what) {
    *error = what + (errno != 0 ? std::string(": ") + strerror(errno) : std::string());
    return false;
  };
  int count = 0;
  ibv_device** devices = verbs_->get_device_list(&count);
  if (devices == nullptr) return fail("ibv_get_device_list");
  ibv_device* chosen = nullptr;
  for (int i = 0; i < count && chosen == nullptr; ++i) {
    if (settings.device.empty() || settings.device == verbs_->get_device_name(devices[i])) chosen = devices[i];
  }
  if (chosen != nullptr) context_ = verbs_->open_device(chosen);
  verbs_->free_device_list(devices);
  errno = 0;
  if (chosen == nullptr) return fail(settings.device.empty() ? "no RDMA device" : "no RDMA device " + settings.device);
  if (context_ == nullptr) return fail("ibv_open_device");
  ibv_port_attr port{};
  if (verbs_->query_port(context_, static_cast<uint8_t>(settings.port), &port) != 0) return fail("ibv_query_port");
  if (port.state != IBV_PORT_ACTIVE) return fail("RDMA port " + std::to_string(settings.port) + " is not active");
  RdmaHello mine{};
  mine.magic = kHelloMagic;
  mine.version = kHelloVersion;
  mine.mtu = static_cast<uint8_t>(port.active_mtu);
  mine.lid = port.lid;
  const int gid_index = settings.gid_index >= 0 ? settings.gid_index
                        : port.link_layer == IBV_LINK_LAYER_ETHERNET ? 0 : -1;
  if (gid_index >= 0) {
    ibv_gid gid{};
    if (verbs_->query_gid(context_, static_cast<uint8_t>(settings.port), gid_index, &gid) != 0) {
      return fail("ibv_query_gid");
    }
    std::memcpy(mine.gid, gid.raw, sizeof(mine.gid));
    mine.is_global = 1;
  }
  pd_ = verbs_->alloc_pd(context_);
  if (pd_ == nullptr) return fail("ibv_alloc_pd");
  completion_channel_ = verbs_->create_comp_channel(context_);
  if (completion_channel_ == nullptr) return fail("ibv_create_comp_channel");
  fcntl(completion_channel_->fd, F_SETFL, fcntl(completion_channel_->fd, F_GETFL) | O_NONBLOCK);
  const int depth = queue_depth();
  cq_ = verbs_->create_cq(context_, 2 * depth, nullptr, completion_channel_, 0);
  if (cq_ == nullptr) return fail("ibv_create_cq");
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = static_cast<uint32_t>(depth);
  init.cap.max_recv_wr = static_cast<uint32_t>(depth);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = kInlineWanted;
  qp_ = verbs_->create_qp(pd_, &init);
  if (qp_ == nullptr) {  // some providers cap inline data lower: go without it
    init.cap.max_inline_data = 0;
    qp_ = verbs_->create_qp(pd_, &init);
  }
  if (qp_ == nullptr) return fail("ibv_create_qp");
  max_inline_ = init.cap.max_inline_data;
  ring_bytes_ = size_t{settings.slot_bytes} * settings.slot_count;
  ring_ = static_cast<uint8_t*>(AllocatePages(ring_bytes_));
  if (ring_ == nullptr) return fail("receive ring allocation");
  ring_mr_ = verbs_->reg_mr(pd_, ring_, ring_bytes_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (ring_mr_ == nullptr) return fail("ibv_reg_mr (receive ring; check the memlock limit)");
  if (settings.bulk_bytes % kBulkAlignment != 0 || settings.bulk_bytes > kMaxBulkBytes) {
    errno = 0;
    return fail("the bulk region must be a multiple of 4 KiB up to 256 MiB");
  }
  if (settings.bulk_bytes > 0) {
    bulk_ = static_cast<uint8_t*>(AllocatePages(settings.bulk_bytes));
    if (bulk_ == nullptr) return fail("bulk region allocation");
    // Registered once for the link's life: the peer writes only here and into the ring.
    bulk_mr_ = verbs_->reg_mr(pd_, bulk_, settings.bulk_bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (bulk_mr_ == nullptr) return fail("ibv_reg_mr (bulk region; check the memlock limit)");
  }

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = static_cast<uint8_t>(settings.port);
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (verbs_->modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    return fail("ibv_modify_qp INIT");
  }
  // Receives are posted before the peer can write: every fragment and credit message finds one.
  for (int i = 0; i < depth; ++i) {
    ibv_recv_wr receive{};
    ibv_recv_wr* bad = nullptr;
    receive.wr_id = kReceiveWork | static_cast<uint64_t>(i);
    if (verbs_->post_recv(qp_, &receive, &bad) != 0) return fail("ibv_post_recv");
  }
  uint32_t psn = 0;
  if (getrandom(&psn, sizeof(psn), 0) != sizeof(psn)) psn = static_cast<uint32_t>(getpid());
  mine.qpn = qp_->qp_num;
  mine.psn = psn & 0xffffff;
  mine.ring_address = reinterpret_cast<uint64_t>(ring_);
  mine.ring_rkey = ring_mr_->rkey;
  mine.slot_bytes = settings.slot_bytes;
  mine.slot_count = settings.slot_count;
  mine.bulk_address = reinterpret_cast<uint64_t>(bulk_);
  mine.bulk_rkey = bulk_mr_ != nullptr ? bulk_mr_->rkey : 0;
  mine.bulk_bytes = settings.bulk_bytes;

  if (!Transfer(bootstrap_fd_, &mine, sizeof(mine), true, deadline, error) ||
      !Transfer(bootstrap_fd_, &peer_, sizeof(peer_), false, deadline, error)) {
    return false;
  }
  if (peer_.magic != kHelloMagic) {
    *error = "the peer does not speak curelay's RDMA handshake";
    return false;
  }
  if (peer_.version != kHelloVersion) {
    *error = "the peer speaks version " + std::to_string(peer_.version) + " of curelay's RDMA channel, this side " +
             std::to_string(kHelloVersion) + " (client and backend from different builds)";
    return false;
  }
  if (peer_.slot_bytes < kMinSlotBytes || peer_.slot_bytes > kMaxSlotBytes || peer_.slot_count < kMinSlots ||
      peer_.slot_count > kMaxSlots || peer_.mtu < IBV_MTU_256 || peer_.mtu > IBV_MTU_4096 ||
      peer_.bulk_bytes % kBulkAlignment != 0 || peer_.bulk_bytes > kMaxBulkBytes) {
    *error = "the peer's ring geometry, bulk region or MTU is out of range";
    return false;
  }
  if (peer_.bulk_bytes > 0) {
    bulk_staging_ = static_cast<uint8_t*>(AllocatePages(peer_.bulk_bytes));
    if (bulk_staging_ == nullptr) return fail("bulk staging allocation");
    bulk_staging_mr_ = verbs_->reg_mr(pd_, bulk_staging_, peer_.bulk_bytes, IBV_ACCESS_LOCAL_WRITE);
    if (bulk_staging_mr_ == nullptr) return fail("ibv_reg_mr (bulk staging; check the memlock limit)");
  }
  staging_bytes_ = size_t{peer_.slot_bytes} * peer_.slot_count;
  staging_ = static_cast<uint8_t*>(AllocatePages(staging_bytes_));
  if (staging_ == nullptr) return fail("send staging allocation");
  staging_mr_ = verbs_->reg_mr(pd_, staging_, staging_bytes_, IBV_ACCESS_LOCAL_WRITE);
  if (staging_mr_ == nullptr) return fail("ibv_reg_mr (send staging; check the memlock limit)");

  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min<int>(mine.mtu, peer_.mtu));
  attr.dest_qp_num = peer_.qpn;
  attr.rq_psn = peer_.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = static_cast<uint8_t>(settings.min_rnr_timer);
  attr.ah_attr.port_num = static_cast<uint8_t>(settings.port);
  attr.ah_attr.dlid = peer_.lid;
  if (peer_.is_global != 0 && gid_index >= 0) {
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, peer_.gid, sizeof(peer_.gid));
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
    attr.ah_attr.grh.hop_limit = 255;
  }
  if (verbs_->modify_qp(qp_, &attr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    return fail("ibv_modify_qp RTR");
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = static_cast<uint8_t>(settings.timeout_exponent);
  attr.retry_cnt = static_cast<uint8_t>(settings.retry_count);
  attr.rnr_retry = static_cast<uint8_t>(settings.rnr_retry);
  attr.sq_psn = mine.psn;
  attr.max_rd_atomic = 1;
  if (verbs_->modify_qp(qp_, &attr,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                            IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    return fail("ibv_modify_qp RTS");
  }
  // Neither side writes before the other is ready to receive.
  uint8_t ready = 1, peer_ready = 0;
  if (!Transfer(bootstrap_fd_, &ready, 1, true, deadline, error) ||
      !Transfer(bootstrap_fd_, &peer_ready, 1, false, deadline, error)) {
    return false;
  }
  return true;
}

uint32_t RdmaLink::staging_lkey() const { return staging_mr_->lkey; }
uint32_t RdmaLink::bulk_staging_lkey() const { return bulk_staging_mr_->lkey; }

RdmaLink::~RdmaLink() {
  if (verbs_ != nullptr) {
    if (qp_ != nullptr) verbs_->destroy_qp(qp_);
    if (ring_mr_ != nullptr) verbs_->dereg_mr(ring_mr_);
    if (staging_mr_ != nullptr) verbs_->dereg_mr(staging_mr_);
    if (bulk_mr_ != nullptr) verbs_->dereg_mr(bulk_mr_);
    if (bulk_staging_mr_ != nullptr) verbs_->dereg_mr(bulk_staging_mr_);
    if (cq_ != nullptr) verbs_->destroy_cq(cq_);
    if (completion_channel_ != nullptr) verbs_->destroy_comp_channel(completion_channel_);
    if (pd_ != nullptr) verbs_->dealloc_pd(pd_);
    if (context_ != nullptr) verbs_->close_device(context_);
  }
  free(ring_);
  free(staging_);
  free(bulk_);
  free(bulk_staging_);
  if (bootstrap_fd_ >= 0) close(bootstrap_fd_);
}

}  // namespace curelay::transport
