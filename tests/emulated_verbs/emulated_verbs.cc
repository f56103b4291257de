// Test fixture: a drop-in libibverbs.so.1 that emulates one InfiniBand port with reliable-connected queue pairs
// between processes over shared memory. Never a product mode: see README.md for the design and how tests load it.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// verbs.h wraps these exported names in macros for its callers; the fixture defines the names themselves.
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_get_device_list

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kWireMagic = 0x656d7576'65726273;  // "emuverbs"
constexpr uint64_t kWireBytes = uint64_t{16} << 20;   // inbound ring of one QP
constexpr uint32_t kMaxMessageBytes = 4u << 20;       // the port's max_msg_sz: one packet per work request
constexpr uint32_t kMaxInline = 512;
constexpr uint32_t kMaxWr = 8192;
constexpr uint32_t kMaxSge = 8;
constexpr uint32_t kPsnMask = 0xffffff;

// ---- the wire: one single-producer/single-consumer byte ring per QP, in a shared file, written by the peer ----

struct WireHeader {
  uint64_t magic;
  std::atomic<uint64_t> head;  // bytes produced (peer's service thread)
  std::atomic<uint64_t> tail;  // bytes consumed (owner's service thread)
  std::atomic<uint32_t> attached;
  uint32_t owner_pid;
};
constexpr uint64_t kWireHeaderBytes = 4096;

enum class PacketKind : uint32_t { kData = 1, kAck = 2, kNak = 3 };
enum class NakSyndrome : uint32_t { kRnr = 1, kRemoteAccess = 2, kInvalidRequest = 3 };

struct Packet {
  PacketKind kind;
  uint32_t psn;
  uint32_t opcode;    // ibv_wr_opcode for data; NakSyndrome for naks; min_rnr_timer in the upper byte of an RNR nak
  uint32_t length;    // payload bytes that follow
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t imm_data;  // network order, as posted
};

struct Wire {
  WireHeader* header = nullptr;
  uint8_t* data = nullptr;

  uint64_t Free() const {
    return kWireBytes - (header->head.load(std::memory_order_relaxed) - header->tail.load(std::memory_order_acquire));
  }
  void CopyIn(uint64_t position, const void* bytes, uint64_t size) {
    if (bytes == nullptr || size == 0) return;
    const uint64_t offset = position % kWireBytes, first = std::min(size, kWireBytes - offset);
    std::memcpy(data + offset, bytes, first);
    std::memcpy(data, static_cast<const uint8_t*>(bytes) + first, size - first);
  }
  void CopyOut(uint64_t position, void* bytes, uint64_t size) const {
    const uint64_t offset = position % kWireBytes, first = std::min(size, kWireBytes - offset);
    std::memcpy(bytes, data + offset, first);
    std::memcpy(static_cast<uint8_t*>(bytes) + first, data, size - first);
  }
  // Whole packets or nothing.
  bool Put(const Packet& packet, const uint8_t* payload) {
    const uint64_t need = sizeof(Packet) + packet.length;
    if (Free() < need) return false;
    const uint64_t head = header->head.load(std::memory_order_relaxed);
    CopyIn(head, &packet, sizeof(packet));
    if (packet.length > 0) CopyIn(head + sizeof(Packet), payload, packet.length);
    header->head.store(head + need, std::memory_order_release);
    return true;
  }
  bool Get(Packet* packet, std::vector<uint8_t>* payload) {
    const uint64_t tail = header->tail.load(std::memory_order_relaxed);
    if (header->head.load(std::memory_order_acquire) == tail) return false;
    CopyOut(tail, packet, sizeof(*packet));
    payload->resize(std::min<uint32_t>(packet->length, kMaxMessageBytes));
    if (packet->length > 0) CopyOut(tail + sizeof(Packet), payload->data(), payload->size());
    header->tail.store(tail + sizeof(Packet) + packet->length, std::memory_order_release);
    return true;
  }
};

std::string WireDirectory() {
  const char* directory = getenv("CURELAY_EMULATED_VERBS_DIR");
  return directory != nullptr && *directory != '\0' ? directory : "/dev/shm";
}
std::string WirePath(uint32_t qpn) {
  return WireDirectory() + "/curelay-emulated-verbs-" + std::to_string(getuid()) + "-qp-" + std::to_string(qpn);
}

bool MapWire(int fd, Wire* wire) {
  void* mapping = mmap(nullptr, kWireHeaderBytes + kWireBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) return false;
  wire->header = static_cast<WireHeader*>(mapping);
  wire->data = static_cast<uint8_t*>(mapping) + kWireHeaderBytes;
  return true;
}

// ---- process-local objects; each begins with the rdma-core struct the caller sees ----

struct EmulatedContext;
struct EmulatedCq;
struct EmulatedCompChannel {
  ibv_comp_channel base;
  int write_fd;
  std::mutex mutex;
  std::deque<EmulatedCq*> fired;
};

struct EmulatedCq {
  ibv_cq base;
  std::mutex mutex;
  std::deque<ibv_wc> entries;
  bool armed = false;
};

struct EmulatedMr {
  ibv_mr base;
  int access;
};

struct RecvRequest {
  uint64_t wr_id;
  std::vector<ibv_sge> sges;
};

struct SendRequest {
  uint64_t wr_id;
  bool signaled;
  ibv_wc_opcode opcode;
  Packet packet;
  std::vector<uint8_t> payload;
  Clock::time_point started;
};

struct EmulatedQp {
  ibv_qp base;
  std::mutex mutex;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
  int access_flags = 0;
  uint32_t dest_qpn = 0, next_psn = 0, expected_psn = 0;
  uint8_t timeout = 14, retry_cnt = 7, rnr_retry = 7, min_rnr_timer = 12;
  int rnr_left = 7;
  std::deque<SendRequest> outstanding;  // posted, not yet acknowledged; [0, transmitted) already on the wire
  size_t transmitted = 0;
  Clock::time_point hold_until{};       // RNR back-off
  std::deque<RecvRequest> recvs;
  std::deque<Packet> control;           // acks and naks to send
  Wire inbound, outbound;
  int inbound_fd = -1;
  bool inbound_unlinked = false;
  Clock::time_point next_attach_try{};
  int in_service = 0;  // guarded by Globals::mutex
};

struct Globals {
  std::mutex mutex;  // guards the lists below; never taken while a QP's mutex is held
  std::vector<EmulatedQp*> qps;
  std::map<uint32_t, EmulatedMr*> mrs;  // by lkey == rkey
  uint32_t key_salt = 0;
  uint32_t next_key = 1;
  bool service_started = false;
};
// Never destroyed: the service thread outlives static destructors.
Globals* globals = new Globals;
Globals& G() { return *globals; }

// A forked child has none of its parent's threads, and another thread may have held the mutex at the fork: it
// starts with an empty world of its own (its parent's queue pairs and regions are not usable there, as with a real
// NIC) and its own service thread on first use. The parent's objects are left to leak in the child.
[[maybe_unused]] const int reset_in_forked_child = pthread_atfork(nullptr, nullptr, [] { globals = new Globals; });

ibv_device emulated_device;

// ---- completions ----

void PushCompletion(ibv_cq* cq_base, const ibv_wc& wc) {
  auto* cq = reinterpret_cast<EmulatedCq*>(cq_base);
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(cq->mutex);
    cq->entries.push_back(wc);
    notify = cq->armed && cq->base.channel != nullptr;
    cq->armed = false;
  }
  if (notify) {
    auto* channel = reinterpret_cast<EmulatedCompChannel*>(cq->base.channel);
    {
      std::lock_guard<std::mutex> lock(channel->mutex);
      channel->fired.push_back(cq);
    }
    const char byte = 1;
    (void)!write(channel->write_fd, &byte, 1);
  }
}

ibv_wc Completion(EmulatedQp* qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode, uint32_t bytes) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = bytes;
  wc.qp_num = qp->base.qp_num;
  return wc;
}

// Error state: every posted request that has not completed is flushed. Caller holds qp->mutex.
void EnterError(EmulatedQp* qp) {
  qp->base.state = IBV_QPS_ERR;
  for (const auto& request : qp->outstanding) {
    PushCompletion(qp->base.send_cq, Completion(qp, request.wr_id, IBV_WC_WR_FLUSH_ERR, request.opcode, 0));
  }
  qp->outstanding.clear();
  qp->transmitted = 0;
  for (const auto& request : qp->recvs) {
    PushCompletion(qp->base.recv_cq, Completion(qp, request.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0));
  }
  qp->recvs.clear();
}

// Fails the oldest send request with `status` and moves the QP to the error state. Caller holds qp->mutex.
void FailOldest(EmulatedQp* qp, ibv_wc_status status) {
  const SendRequest request = std::move(qp->outstanding.front());
  qp->outstanding.pop_front();
  PushCompletion(qp->base.send_cq, Completion(qp, request.wr_id, status, request.opcode, 0));
  EnterError(qp);
}

EmulatedMr* FindMr(uint32_t key) {
  std::lock_guard<std::mutex> lock(G().mutex);
  const auto found = G().mrs.find(key);
  return found == G().mrs.end() ? nullptr : found->second;
}

bool Covers(const EmulatedMr* mr, uint64_t address, uint64_t length) {
  const auto start = reinterpret_cast<uint64_t>(mr->base.addr);
  return address >= start && length <= mr->base.length && address - start <= mr->base.length - length;
}

// The IB spec's RNR NAK timer table (microseconds), indexed by min_rnr_timer.
constexpr uint32_t kRnrMicroseconds[32] = {655360, 10,    20,    30,    40,    60,    80,     120,
                                           160,    240,   320,   480,   640,   960,   1280,   1920,
                                           2560,   3840,  5120,  7680,  10240, 15360, 20480,  30720,
                                           40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

// Local ACK timeout: 4.096 us * 2^timeout per attempt; 0 means infinite.
std::chrono::microseconds AckTimeout(uint8_t timeout) {
  if (timeout == 0) return std::chrono::microseconds::max();
  return std::chrono::microseconds(static_cast<int64_t>(4.096 * static_cast<double>(uint64_t{1} << timeout)));
}

}  // namespace

// RDMA WRITEs without immediate data (with bytes) this process's memory took as a responder: tests see through it
// whether a transport used its bulk path.
extern "C" __attribute__((visibility("default"))) std::atomic<uint64_t> curelay_emulated_verbs_plain_writes{0};

namespace {

// ---- the responder: applies one inbound data packet to this process's memory. Caller holds qp->mutex. ----

void Respond(EmulatedQp* qp, const Packet& packet, const std::vector<uint8_t>& payload) {
  if (qp->base.state != IBV_QPS_RTR && qp->base.state != IBV_QPS_RTS) return;  // dropped: no ack, peer times out
  if (packet.psn != qp->expected_psn) return;  // after an RNR nak, until the requester goes back to it
  Packet reply{};
  reply.psn = packet.psn;
  const auto opcode = static_cast<ibv_wr_opcode>(packet.opcode);
  const bool is_write = opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool consumes_receive = opcode != IBV_WR_RDMA_WRITE;
  auto nak = [&](NakSyndrome syndrome) {
    reply.kind = PacketKind::kNak;
    reply.opcode = static_cast<uint32_t>(syndrome) | (uint32_t{qp->min_rnr_timer} << 24);
    qp->control.push_back(reply);
  };
  // A remote access violation (the spec's class C responder error) naks the requester and puts this QP in the error
  // state too: its posted receives are flushed, so its owner learns of the attempt at once (a real HCA also raises
  // IBV_EVENT_QP_ACCESS_ERR, an async event this fixture does not emulate).
  const auto access_violation = [&] {
    nak(NakSyndrome::kRemoteAccess);
    EnterError(qp);
  };
  if (is_write && packet.length > 0) {
    const EmulatedMr* mr = FindMr(packet.rkey);
    if (mr == nullptr || mr->base.pd != qp->base.pd || (mr->access & IBV_ACCESS_REMOTE_WRITE) == 0 ||
        (qp->access_flags & IBV_ACCESS_REMOTE_WRITE) == 0 || !Covers(mr, packet.remote_addr, packet.length)) {
      access_violation();
      return;
    }
  }
  if (is_write && packet.length == 0 && (qp->access_flags & IBV_ACCESS_REMOTE_WRITE) == 0) {
    access_violation();
    return;
  }
  if (consumes_receive && qp->recvs.empty()) {
    nak(NakSyndrome::kRnr);
    return;
  }
  if (is_write) {
    if (packet.length > 0) std::memcpy(reinterpret_cast<void*>(packet.remote_addr), payload.data(), packet.length);
    if (packet.length > 0 && opcode == IBV_WR_RDMA_WRITE) ++curelay_emulated_verbs_plain_writes;
    if (consumes_receive) {
      const RecvRequest receive = std::move(qp->recvs.front());
      qp->recvs.pop_front();
      ibv_wc wc = Completion(qp, receive.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, packet.length);
      wc.wc_flags = IBV_WC_WITH_IMM;
      wc.imm_data = packet.imm_data;
      PushCompletion(qp->base.recv_cq, wc);
    }
  } else {  // SEND: scatter into the receive's buffers, which must be local-writable and large enough
    const RecvRequest receive = std::move(qp->recvs.front());
    qp->recvs.pop_front();
    uint64_t room = 0;
    bool valid = true;
    for (const auto& sge : receive.sges) {
      const EmulatedMr* mr = FindMr(sge.lkey);
      valid = valid && mr != nullptr && mr->base.pd == qp->base.pd && (mr->access & IBV_ACCESS_LOCAL_WRITE) != 0 &&
              Covers(mr, sge.addr, sge.length);
      room += sge.length;
    }
    if (!valid || room < packet.length) {
      PushCompletion(qp->base.recv_cq, Completion(qp, receive.wr_id, valid ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR,
                                                  IBV_WC_RECV, 0));
      nak(NakSyndrome::kInvalidRequest);
      EnterError(qp);
      return;
    }
    uint64_t copied = 0;
    for (const auto& sge : receive.sges) {
      const uint64_t chunk = std::min<uint64_t>(sge.length, packet.length - copied);
      std::memcpy(reinterpret_cast<void*>(sge.addr), payload.data() + copied, chunk);
      copied += chunk;
    }
    ibv_wc wc = Completion(qp, receive.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, packet.length);
    if (opcode == IBV_WR_SEND_WITH_IMM) {
      wc.wc_flags = IBV_WC_WITH_IMM;
      wc.imm_data = packet.imm_data;
    }
    PushCompletion(qp->base.recv_cq, wc);
  }
  qp->expected_psn = (qp->expected_psn + 1) & kPsnMask;
  reply.kind = PacketKind::kAck;
  qp->control.push_back(reply);
}

// ---- the requester: acks and naks for this QP's own sends. Caller holds qp->mutex. ----

void HandleReply(EmulatedQp* qp, const Packet& packet) {
  if (qp->outstanding.empty() || qp->transmitted == 0 || packet.psn != qp->outstanding.front().packet.psn) return;
  if (packet.kind == PacketKind::kAck) {
    const SendRequest request = std::move(qp->outstanding.front());
    qp->outstanding.pop_front();
    --qp->transmitted;
    qp->rnr_left = qp->rnr_retry;
    if (!qp->outstanding.empty()) qp->outstanding.front().started = Clock::now();
    if (request.signaled) {
      const uint32_t bytes = request.opcode == IBV_WC_RDMA_WRITE ? 0 : request.packet.length;
      PushCompletion(qp->base.send_cq, Completion(qp, request.wr_id, IBV_WC_SUCCESS, request.opcode, bytes));
    }
    return;
  }
  switch (static_cast<NakSyndrome>(packet.opcode & 0xff)) {
    case NakSyndrome::kRnr:
      if (qp->rnr_retry != 7 && qp->rnr_left-- <= 0) {
        FailOldest(qp, IBV_WC_RNR_RETRY_EXC_ERR);
        return;
      }
      // Go back to the nak'd request after the responder's RNR timer; everything behind it is resent too.
      qp->transmitted = 0;
      qp->hold_until = Clock::now() + std::chrono::microseconds(kRnrMicroseconds[(packet.opcode >> 24) & 31]);
      for (auto& request : qp->outstanding) request.started = qp->hold_until;
      return;
    case NakSyndrome::kRemoteAccess:
      FailOldest(qp, IBV_WC_REM_ACCESS_ERR);
      return;
    case NakSyndrome::kInvalidRequest:
      FailOldest(qp, IBV_WC_REM_INV_REQ_ERR);
      return;
  }
}

// ---- the service thread: one per process, drives every QP of the process ----

bool TryAttach(EmulatedQp* qp) {
  if (qp->outbound.header != nullptr) return true;
  const auto now = Clock::now();
  if (now < qp->next_attach_try) return false;
  qp->next_attach_try = now + std::chrono::milliseconds(1);
  const int fd = open(WirePath(qp->dest_qpn).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  Wire wire;
  const bool mapped = MapWire(fd, &wire);
  close(fd);
  if (!mapped) return false;
  if (wire.header->magic != kWireMagic) {
    munmap(wire.header, kWireHeaderBytes + kWireBytes);
    return false;
  }
  wire.header->attached.store(1, std::memory_order_release);
  qp->outbound = wire;
  return true;
}

// No acknowledgement within (retry_cnt + 1) ack timeouts: the peer is gone (the emulated wire never loses packets
// unless cut, so the retries a real HCA would send could not change the outcome).
void ExpireUnacknowledged(EmulatedQp* qp) {
  if (qp->base.state != IBV_QPS_RTS || qp->outstanding.empty()) return;
  const auto limit = AckTimeout(qp->timeout);
  if (limit != std::chrono::microseconds::max() &&
      Clock::now() - qp->outstanding.front().started > limit * (qp->retry_cnt + 1)) {
    FailOldest(qp, IBV_WC_RETRY_EXC_ERR);
  }
}

// A cut link (CURELAY_EMULATED_VERBS_CUT_FILE names a file; while it exists): every packet this process would send
// or receive is lost, as on a pulled cable. Both processes stay alive and keep their sockets.
bool LinkCut() {
  static const char* const path = getenv("CURELAY_EMULATED_VERBS_CUT_FILE");
  return path != nullptr && access(path, F_OK) == 0;
}

bool ServiceQp(EmulatedQp* qp, bool cut) {
  std::lock_guard<std::mutex> lock(qp->mutex);
  bool busy = false;
  if (cut) {
    Packet lost;
    std::vector<uint8_t> lost_payload;
    while (qp->inbound.Get(&lost, &lost_payload)) {
    }
    qp->control.clear();
    ExpireUnacknowledged(qp);
    return false;
  }
  // The owner unlinks its wire once the peer has mapped it, so a finished session leaves no file behind.
  if (!qp->inbound_unlinked && qp->inbound.header->attached.load(std::memory_order_acquire) != 0) {
    unlink(WirePath(qp->base.qp_num).c_str());
    qp->inbound_unlinked = true;
  }
  Packet packet;
  std::vector<uint8_t> payload;
  for (int budget = 64; budget > 0 && qp->inbound.Get(&packet, &payload); --budget) {
    busy = true;
    if (packet.kind == PacketKind::kData) {
      Respond(qp, packet, payload);
    } else if (qp->base.state == IBV_QPS_RTS) {
      HandleReply(qp, packet);
    }
  }
  // A QP that entered the error state still sends the nak that put it there.
  if (qp->base.state == IBV_QPS_RESET || qp->base.state == IBV_QPS_INIT) return busy;
  if (qp->base.state == IBV_QPS_ERR && qp->control.empty()) return busy;
  if (!TryAttach(qp)) {
    // A peer that never appears is a peer that never answers: the requests time out below.
  } else {
    while (!qp->control.empty() && qp->outbound.Put(qp->control.front(), nullptr)) {
      qp->control.pop_front();
      busy = true;
    }
    if (qp->base.state == IBV_QPS_RTS && Clock::now() >= qp->hold_until) {
      while (qp->transmitted < qp->outstanding.size()) {
        const SendRequest& request = qp->outstanding[qp->transmitted];
        if (!qp->outbound.Put(request.packet, request.payload.data())) break;
        ++qp->transmitted;
        busy = true;
      }
    }
  }
  ExpireUnacknowledged(qp);
  return busy;
}

void ServiceLoop() {
  int idle = 0;
  for (;;) {
    std::vector<EmulatedQp*> qps;
    {
      std::lock_guard<std::mutex> lock(G().mutex);
      qps = G().qps;
      for (EmulatedQp* qp : qps) ++qp->in_service;  // pins it: destroy_qp waits for the pin to drop
    }
    bool busy = false;
    const bool cut = LinkCut();
    for (EmulatedQp* qp : qps) busy |= ServiceQp(qp, cut);  // without the list lock, which FindMr takes
    {
      std::lock_guard<std::mutex> lock(G().mutex);
      for (EmulatedQp* qp : qps) --qp->in_service;
    }
    if (busy) {
      idle = 0;
      continue;
    }
    ++idle;
    struct timespec pause = {0, idle < 2000 ? 2'000L : 100'000L};
    nanosleep(&pause, nullptr);
  }
}

void StartService() {
  std::lock_guard<std::mutex> lock(G().mutex);
  if (G().service_started) return;
  G().service_started = true;
  uint32_t salt = 0;
  if (getrandom(&salt, sizeof(salt), 0) != sizeof(salt)) salt = static_cast<uint32_t>(getpid()) * 2654435761u;
  G().key_salt = salt & 0xfff00000;
  std::thread(ServiceLoop).detach();
}

int Fail(int error) {
  errno = error;
  return error;
}

// ---- the data-path ops, reached through ibv_context.ops ----

int PostSend(ibv_qp* qp_base, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  auto* qp = reinterpret_cast<EmulatedQp*>(qp_base);
  std::lock_guard<std::mutex> lock(qp->mutex);
  for (; wr != nullptr; wr = wr->next) {
    *bad_wr = wr;
    if (qp->base.state != IBV_QPS_RTS && qp->base.state != IBV_QPS_ERR) return Fail(EINVAL);
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_send_sge) return Fail(EINVAL);
    if (qp->outstanding.size() >= qp->cap.max_send_wr) return Fail(ENOMEM);
    SendRequest request{};
    request.wr_id = wr->wr_id;
    request.signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    switch (wr->opcode) {
      case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM: request.opcode = IBV_WC_SEND; break;
      case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: request.opcode = IBV_WC_RDMA_WRITE; break;
      default: return Fail(EINVAL);  // reads and atomics are not emulated
    }
    if (qp->base.state == IBV_QPS_ERR) {
      PushCompletion(qp->base.send_cq, Completion(qp, wr->wr_id, IBV_WC_WR_FLUSH_ERR, request.opcode, 0));
      continue;
    }
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
    const bool inline_data = (wr->send_flags & IBV_SEND_INLINE) != 0;
    if (inline_data && total > qp->cap.max_inline_data) return Fail(EINVAL);
    ibv_wc_status local_error = IBV_WC_SUCCESS;
    if (total > kMaxMessageBytes) local_error = IBV_WC_LOC_LEN_ERR;
    for (int i = 0; i < wr->num_sge && local_error == IBV_WC_SUCCESS && !inline_data; ++i) {
      const EmulatedMr* mr = FindMr(wr->sg_list[i].lkey);
      if (mr == nullptr || mr->base.pd != qp->base.pd || !Covers(mr, wr->sg_list[i].addr, wr->sg_list[i].length)) {
        local_error = IBV_WC_LOC_PROT_ERR;
      }
    }
    if (local_error != IBV_WC_SUCCESS) {
      PushCompletion(qp->base.send_cq, Completion(qp, wr->wr_id, local_error, request.opcode, 0));
      EnterError(qp);
      continue;
    }
    // The bytes are taken now: the caller may not touch them until the completion anyway, and a real HCA's later
    // DMA read would see the same bytes.
    request.payload.resize(total);
    uint64_t offset = 0;
    for (int i = 0; i < wr->num_sge; ++i) {
      std::memcpy(request.payload.data() + offset, reinterpret_cast<const void*>(wr->sg_list[i].addr),
                  wr->sg_list[i].length);
      offset += wr->sg_list[i].length;
    }
    request.packet.kind = PacketKind::kData;
    request.packet.psn = qp->next_psn;
    qp->next_psn = (qp->next_psn + 1) & kPsnMask;
    request.packet.opcode = wr->opcode;
    request.packet.length = static_cast<uint32_t>(total);
    request.packet.imm_data = wr->imm_data;
    if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      request.packet.remote_addr = wr->wr.rdma.remote_addr;
      request.packet.rkey = wr->wr.rdma.rkey;
    }
    request.started = Clock::now();
    if (qp->outstanding.empty()) request.started = std::max(request.started, qp->hold_until);
    qp->outstanding.push_back(std::move(request));
  }
  *bad_wr = nullptr;
  return 0;
}

int PostRecv(ibv_qp* qp_base, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  auto* qp = reinterpret_cast<EmulatedQp*>(qp_base);
  std::lock_guard<std::mutex> lock(qp->mutex);
  for (; wr != nullptr; wr = wr->next) {
    *bad_wr = wr;
    if (qp->base.state == IBV_QPS_RESET) return Fail(EINVAL);
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_recv_sge) return Fail(EINVAL);
    if (qp->recvs.size() >= qp->cap.max_recv_wr) return Fail(ENOMEM);
    if (qp->base.state == IBV_QPS_ERR) {
      PushCompletion(qp->base.recv_cq, Completion(qp, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0));
      continue;
    }
    qp->recvs.push_back({wr->wr_id, std::vector<ibv_sge>(wr->sg_list, wr->sg_list + wr->num_sge)});
  }
  *bad_wr = nullptr;
  return 0;
}

int PollCq(ibv_cq* cq_base, int entries, ibv_wc* wc) {
  auto* cq = reinterpret_cast<EmulatedCq*>(cq_base);
  std::lock_guard<std::mutex> lock(cq->mutex);
  int polled = 0;
  while (polled < entries && !cq->entries.empty()) {
    wc[polled++] = cq->entries.front();
    cq->entries.pop_front();
  }
  return polled;
}

int ReqNotifyCq(ibv_cq* cq_base, int /*solicited_only: every completion notifies*/) {
  auto* cq = reinterpret_cast<EmulatedCq*>(cq_base);
  std::lock_guard<std::mutex> lock(cq->mutex);
  cq->armed = true;
  return 0;
}

struct EmulatedContext {
  ibv_context base{};
  EmulatedContext() {
    base.device = &emulated_device;
    base.ops.post_send = PostSend;
    base.ops.post_recv = PostRecv;
    base.ops.poll_cq = PollCq;
    base.ops.req_notify_cq = ReqNotifyCq;
    base.num_comp_vectors = 1;
    pthread_mutex_init(&base.mutex, nullptr);
  }
};

}  // namespace

// ---- the exported libibverbs names ----

#pragma GCC visibility push(default)
extern "C" {

// Lets a test confirm that the fixture, not a real rdma-core, was loaded.
__attribute__((visibility("default"))) int curelay_emulated_verbs = 1;

ibv_device** ibv_get_device_list(int* count) {
  const char* none = getenv("CURELAY_EMULATED_VERBS_NO_DEVICE");
  const bool present = none == nullptr || std::strcmp(none, "1") != 0;
  emulated_device.node_type = IBV_NODE_CA;
  emulated_device.transport_type = IBV_TRANSPORT_IB;
  std::strcpy(emulated_device.name, "emulated0");
  std::strcpy(emulated_device.dev_name, "uverbs-emulated0");
  auto** list = static_cast<ibv_device**>(calloc(2, sizeof(ibv_device*)));
  if (list == nullptr) return nullptr;
  list[0] = present ? &emulated_device : nullptr;
  if (count != nullptr) *count = present ? 1 : 0;
  return list;
}

void ibv_free_device_list(ibv_device** list) { free(list); }

const char* ibv_get_device_name(ibv_device* device) { return device->name; }

ibv_context* ibv_open_device(ibv_device* device) {
  if (device != &emulated_device) {
    errno = ENODEV;
    return nullptr;
  }
  StartService();
  auto* context = new EmulatedContext;
  return reinterpret_cast<ibv_context*>(context);
}

int ibv_close_device(ibv_context* context) {
  delete reinterpret_cast<EmulatedContext*>(context);
  return 0;
}

int ibv_query_port(ibv_context* /*context*/, uint8_t port, _compat_ibv_port_attr* compat) {
  if (port != 1) return Fail(EINVAL);
  auto* attr = reinterpret_cast<ibv_port_attr*>(compat);  // callers pass an ibv_port_attr (see verbs.h)
  attr->state = IBV_PORT_ACTIVE;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = IBV_MTU_4096;
  attr->gid_tbl_len = 1;
  attr->max_msg_sz = kMaxMessageBytes;
  attr->lid = 1;
  attr->sm_lid = 1;
  attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
  attr->phys_state = 5;  // LinkUp
  attr->active_width = 2;
  attr->active_speed = 32;
  return 0;
}

int ibv_query_gid(ibv_context* /*context*/, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index != 0) return Fail(EINVAL);
  std::memset(gid, 0, sizeof(*gid));
  gid->global.subnet_prefix = htobe64(0xfe80000000000000ull);
  gid->global.interface_id = htobe64(1);
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  auto* pd = new ibv_pd{};
  pd->context = context;
  return pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  delete pd;
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* address, size_t length, int access) {
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 && (access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    errno = EINVAL;  // as the verbs spec requires
    return nullptr;
  }
  auto* mr = new EmulatedMr{};
  mr->base.context = pd->context;
  mr->base.pd = pd;
  mr->base.addr = address;
  mr->base.length = length;
  mr->access = access;
  std::lock_guard<std::mutex> lock(G().mutex);
  const uint32_t key = G().key_salt | (G().next_key++ & 0xfffff);
  mr->base.lkey = mr->base.rkey = key;
  G().mrs[key] = mr;
  return &mr->base;
}

int ibv_dereg_mr(ibv_mr* mr) {
  {
    std::lock_guard<std::mutex> lock(G().mutex);
    G().mrs.erase(mr->lkey);
  }
  delete reinterpret_cast<EmulatedMr*>(mr);
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  auto* channel = new EmulatedCompChannel{};
  channel->base.context = context;
  channel->base.fd = fds[0];
  channel->write_fd = fds[1];
  fcntl(channel->write_fd, F_SETFL, O_NONBLOCK);
  return &channel->base;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel_base) {
  auto* channel = reinterpret_cast<EmulatedCompChannel*>(channel_base);
  close(channel->base.fd);
  close(channel->write_fd);
  delete channel;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int entries, void* cq_context, ibv_comp_channel* channel, int) {
  if (entries < 1 || static_cast<uint32_t>(entries) > kMaxWr * 2) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new EmulatedCq{};
  cq->base.context = context;
  cq->base.channel = channel;
  cq->base.cq_context = cq_context;
  cq->base.cqe = entries;
  return &cq->base;
}

int ibv_destroy_cq(ibv_cq* cq) {
  delete reinterpret_cast<EmulatedCq*>(cq);
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (attr->qp_type != IBV_QPT_RC || attr->srq != nullptr || attr->send_cq == nullptr || attr->recv_cq == nullptr ||
      attr->cap.max_send_wr > kMaxWr || attr->cap.max_recv_wr > kMaxWr || attr->cap.max_send_sge > kMaxSge ||
      attr->cap.max_recv_sge > kMaxSge || attr->cap.max_inline_data > kMaxInline) {
    errno = EINVAL;
    return nullptr;
  }
  auto* qp = new EmulatedQp;
  // A random 24-bit QPN whose wire file is new: QPNs must be unique across the processes of the host.
  for (int attempt = 0; attempt < 64 && qp->inbound_fd < 0; ++attempt) {
    uint32_t qpn = 0;
    if (getrandom(&qpn, sizeof(qpn), 0) != sizeof(qpn)) break;
    qpn = (qpn & kPsnMask) | 1;
    const int fd = open(WirePath(qpn).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) continue;
    if (ftruncate(fd, kWireHeaderBytes + kWireBytes) != 0 || !MapWire(fd, &qp->inbound)) {
      close(fd);
      unlink(WirePath(qpn).c_str());
      break;
    }
    qp->inbound_fd = fd;
    qp->base.qp_num = qpn;
  }
  if (qp->inbound_fd < 0) {
    delete qp;
    errno = ENOMEM;
    return nullptr;
  }
  qp->inbound.header->owner_pid = static_cast<uint32_t>(getpid());
  qp->inbound.header->magic = kWireMagic;
  qp->base.context = pd->context;
  qp->base.qp_context = attr->qp_context;
  qp->base.pd = pd;
  qp->base.send_cq = attr->send_cq;
  qp->base.recv_cq = attr->recv_cq;
  qp->base.qp_type = IBV_QPT_RC;
  qp->base.state = IBV_QPS_RESET;
  qp->base.events_completed = 0;
  qp->cap = attr->cap;
  qp->cap.max_inline_data = std::max<uint32_t>(attr->cap.max_inline_data, 64);
  attr->cap.max_inline_data = qp->cap.max_inline_data;
  qp->sq_sig_all = attr->sq_sig_all != 0;
  std::lock_guard<std::mutex> lock(G().mutex);
  G().qps.push_back(qp);
  return &qp->base;
}

int ibv_modify_qp(ibv_qp* qp_base, ibv_qp_attr* attr, int mask) {
  auto* qp = reinterpret_cast<EmulatedQp*>(qp_base);
  std::lock_guard<std::mutex> lock(qp->mutex);
  if ((mask & IBV_QP_STATE) == 0) return Fail(EINVAL);
  const ibv_qp_state from = qp->base.state, to = attr->qp_state;
  auto requires_mask = [&](int needed) { return (mask & needed) == needed; };
  if (to == IBV_QPS_ERR) {
    EnterError(qp);
    return 0;
  }
  if (to == IBV_QPS_RESET) {
    qp->outstanding.clear();
    qp->recvs.clear();
    qp->control.clear();
    qp->transmitted = 0;
    qp->base.state = IBV_QPS_RESET;
    return 0;
  }
  // The attribute masks the verbs spec requires for each RC transition.
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    if (!requires_mask(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) || attr->port_num != 1) {
      return Fail(EINVAL);
    }
    qp->access_flags = attr->qp_access_flags;
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    if (!requires_mask(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                       IBV_QP_MIN_RNR_TIMER) ||
        attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096 || attr->ah_attr.port_num != 1 ||
        (attr->ah_attr.dlid == 0 && attr->ah_attr.is_global == 0)) {
      return Fail(EINVAL);
    }
    qp->dest_qpn = attr->dest_qp_num;
    qp->expected_psn = attr->rq_psn & kPsnMask;
    qp->min_rnr_timer = attr->min_rnr_timer & 31;
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    if (!requires_mask(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                       IBV_QP_MAX_QP_RD_ATOMIC) ||
        attr->timeout > 31 || attr->retry_cnt > 7 || attr->rnr_retry > 7) {
      return Fail(EINVAL);
    }
    qp->timeout = attr->timeout;
    qp->retry_cnt = attr->retry_cnt;
    qp->rnr_retry = attr->rnr_retry;
    qp->rnr_left = attr->rnr_retry;
    qp->next_psn = attr->sq_psn & kPsnMask;
  } else if (!(from == to && from == IBV_QPS_RTS)) {
    return Fail(EINVAL);
  }
  if ((mask & IBV_QP_ACCESS_FLAGS) != 0) qp->access_flags = attr->qp_access_flags;
  qp->base.state = to;
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp_base) {
  auto* qp = reinterpret_cast<EmulatedQp*>(qp_base);
  for (;;) {  // wait until the service thread is not inside this QP
    {
      std::lock_guard<std::mutex> lock(G().mutex);
      if (qp->in_service == 0) {
        G().qps.erase(std::remove(G().qps.begin(), G().qps.end(), qp), G().qps.end());
        break;
      }
    }
    std::this_thread::yield();
  }
  if (!qp->inbound_unlinked) unlink(WirePath(qp->base.qp_num).c_str());
  munmap(qp->inbound.header, kWireHeaderBytes + kWireBytes);
  if (qp->outbound.header != nullptr) munmap(qp->outbound.header, kWireHeaderBytes + kWireBytes);
  close(qp->inbound_fd);
  delete qp;
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel_base, ibv_cq** cq, void** cq_context) {
  auto* channel = reinterpret_cast<EmulatedCompChannel*>(channel_base);
  char byte;
  if (read(channel->base.fd, &byte, 1) != 1) return -1;  // errno from read (EAGAIN on a non-blocking fd)
  std::lock_guard<std::mutex> lock(channel->mutex);
  if (channel->fired.empty()) return -1;
  *cq = &channel->fired.front()->base;
  *cq_context = (*cq)->cq_context;
  channel->fired.pop_front();
  return 0;
}

void ibv_ack_cq_events(ibv_cq* /*cq*/, unsigned int /*count*/) {}

}  // extern "C"
#pragma GCC visibility pop

