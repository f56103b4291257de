// The emulated verbs fixture's reliable-connected semantics, through the same VerbsApi table the transport uses
// (ctest puts the fixture first on LD_LIBRARY_PATH). Two queue pairs of one process are connected to each other:
// the wire between them is the same shared-memory ring two processes would use.
#include <dlfcn.h>
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "transport/rdma/verbs_api.h"

namespace curelay::transport {
namespace {

using Clock = std::chrono::steady_clock;

struct Fixture {
  const VerbsApi* verbs = nullptr;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
};

Fixture& Open() {
  static Fixture fixture = [] {
    Fixture f;
    std::string error;
    f.verbs = LoadVerbsApi(&error);
    if (f.verbs == nullptr) return f;
    int count = 0;
    ibv_device** devices = f.verbs->get_device_list(&count);
    if (count > 0) f.context = f.verbs->open_device(devices[0]);
    f.verbs->free_device_list(devices);
    if (f.context != nullptr) f.pd = f.verbs->alloc_pd(f.context);
    return f;
  }();
  return fixture;
}

struct Qp {
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
};

Qp MakeQp(int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE) {
  Fixture& f = Open();
  Qp q;
  q.cq = f.verbs->create_cq(f.context, 256, nullptr, nullptr, 0);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = q.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {64, 64, 1, 1, 0};
  q.qp = f.verbs->create_qp(f.pd, &init);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = access;
  EXPECT_EQ(f.verbs->modify_qp(q.qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  return q;
}

void Connect(const Qp& q, uint32_t peer_qpn, int timeout_exponent = 20, int rnr_retry = 7, int retry_count = 7) {
  const VerbsApi& v = *Open().verbs;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_4096;
  attr.dest_qp_num = peer_qpn;
  attr.rq_psn = 7;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 1;  // 10 us: RNR retries come quickly
  attr.ah_attr.dlid = 1;
  attr.ah_attr.port_num = 1;
  ASSERT_EQ(v.modify_qp(q.qp, &attr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = static_cast<uint8_t>(timeout_exponent);
  attr.retry_cnt = static_cast<uint8_t>(retry_count);
  attr.rnr_retry = static_cast<uint8_t>(rnr_retry);
  attr.sq_psn = 7;
  attr.max_rd_atomic = 1;
  ASSERT_EQ(v.modify_qp(q.qp, &attr,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                            IBV_QP_MAX_QP_RD_ATOMIC),
            0);
}

std::vector<ibv_wc> Poll(const Qp& q, size_t count, int timeout_ms = 5000) {
  std::vector<ibv_wc> got;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (got.size() < count && Clock::now() < deadline) {
    ibv_wc wc;
    if (Open().verbs->poll_cq(q.cq, 1, &wc) == 1) {
      got.push_back(wc);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return got;
}

int PostRecv(const Qp& q, uint64_t id, ibv_mr* mr = nullptr, void* address = nullptr, uint32_t length = 0) {
  ibv_sge sge{reinterpret_cast<uint64_t>(address), length, mr != nullptr ? mr->lkey : 0};
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = mr != nullptr ? &sge : nullptr;
  wr.num_sge = mr != nullptr ? 1 : 0;
  ibv_recv_wr* bad = nullptr;
  return Open().verbs->post_recv(q.qp, &wr, &bad);
}

int PostSend(const Qp& q, uint64_t id, ibv_wr_opcode opcode, ibv_mr* mr, void* address, uint32_t length,
             uint64_t remote = 0, uint32_t rkey = 0, uint32_t imm = 0) {
  ibv_sge sge{reinterpret_cast<uint64_t>(address), length, mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return Open().verbs->post_send(q.qp, &wr, &bad);
}

class EmulatedVerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Fixture& f = Open();
    ASSERT_NE(f.verbs, nullptr);
    void* library = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(library, nullptr);
    ASSERT_NE(dlsym(library, "curelay_emulated_verbs"), nullptr) << "the real libibverbs was loaded, not the fixture";
    ASSERT_NE(f.pd, nullptr);
    v = f.verbs;
    buffer_a.assign(1 << 16, 0);
    buffer_b.assign(1 << 16, 0);
    mr_a = v->reg_mr(f.pd, buffer_a.data(), buffer_a.size(), IBV_ACCESS_LOCAL_WRITE);
    mr_b = v->reg_mr(f.pd, buffer_b.data(), buffer_b.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  }
  void TearDown() override {
    for (Qp* q : {&a, &b}) {
      if (q->qp != nullptr) v->destroy_qp(q->qp);
      if (q->cq != nullptr) v->destroy_cq(q->cq);
    }
    if (mr_a != nullptr) v->dereg_mr(mr_a);
    if (mr_b != nullptr) v->dereg_mr(mr_b);
  }
  void Pair(int timeout_exponent = 20, int rnr_retry = 7) {
    a = MakeQp();
    b = MakeQp();
    Connect(a, b.qp->qp_num, timeout_exponent, rnr_retry);
    Connect(b, a.qp->qp_num, timeout_exponent, rnr_retry);
  }
  const VerbsApi* v = nullptr;
  std::vector<uint8_t> buffer_a, buffer_b;
  ibv_mr* mr_a = nullptr;
  ibv_mr* mr_b = nullptr;
  Qp a, b;
};

TEST_F(EmulatedVerbsTest, SendsArriveInOrderWithCompletions) {
  Pair();
  for (int i = 0; i < 32; ++i) ASSERT_EQ(PostRecv(b, 100 + i, mr_b, buffer_b.data() + i * 64, 64), 0);
  for (int i = 0; i < 32; ++i) {
    std::memset(buffer_a.data() + i * 64, 'a' + i % 26, 64);
    ASSERT_EQ(PostSend(a, i, IBV_WR_SEND, mr_a, buffer_a.data() + i * 64, 10 + i), 0);
  }
  const auto received = Poll(b, 32);
  ASSERT_EQ(received.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(received[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(received[i].opcode, IBV_WC_RECV);
    EXPECT_EQ(received[i].wr_id, 100u + i);
    EXPECT_EQ(received[i].byte_len, 10u + i);
    EXPECT_EQ(buffer_b[i * 64], 'a' + i % 26);
  }
  const auto sent = Poll(a, 32);
  ASSERT_EQ(sent.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(sent[i].opcode, IBV_WC_SEND);
    EXPECT_EQ(sent[i].wr_id, static_cast<uint64_t>(i));
  }
}

TEST_F(EmulatedVerbsTest, WriteWithImmediateLandsAndConsumesAReceive) {
  Pair();
  ASSERT_EQ(PostRecv(b, 9), 0);
  std::memcpy(buffer_a.data(), "written", 7);
  ASSERT_EQ(PostSend(a, 1, IBV_WR_RDMA_WRITE_WITH_IMM, mr_a, buffer_a.data(), 7,
                     reinterpret_cast<uint64_t>(buffer_b.data()) + 100, mr_b->rkey, 0xabcd),
            0);
  const auto received = Poll(b, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(received[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(received[0].wr_id, 9u);
  EXPECT_EQ(ntohl(received[0].imm_data), 0xabcdu);
  EXPECT_EQ(received[0].byte_len, 7u);
  EXPECT_EQ(std::memcmp(buffer_b.data() + 100, "written", 7), 0);
  const auto sent = Poll(a, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].opcode, IBV_WC_RDMA_WRITE);
}

// A bad rkey, a write past the region's end and a region without remote write: remote access errors, the
// requester's QP in the error state with later requests flushed, the target memory untouched, and the responder's QP
// in the error state too, its posted receive flushed (how the target learns of the attempt).
TEST_F(EmulatedVerbsTest, RemoteAccessViolationsFailAndStopTheQueuePair) {
  enum Violation { kBadRkey, kPastTheEnd, kNoRemoteWrite };
  for (Violation violation : {kBadRkey, kPastTheEnd, kNoRemoteWrite}) {
    SCOPED_TRACE(violation);
    TearDown();
    a = b = {};
    SetUp();
    ibv_mr* local_only = v->reg_mr(Open().pd, buffer_b.data() + 8192, 4096, IBV_ACCESS_LOCAL_WRITE);
    Pair();
    const uint64_t base = reinterpret_cast<uint64_t>(buffer_b.data());
    uint64_t address = base;
    uint32_t rkey = mr_b->rkey;
    if (violation == kBadRkey) rkey ^= 0x5a5a;
    if (violation == kPastTheEnd) address = base + buffer_b.size() - 4;
    if (violation == kNoRemoteWrite) {
      address = base + 8192;
      rkey = local_only->rkey;
    }
    std::memset(buffer_a.data(), 0x77, 64);
    ASSERT_EQ(PostRecv(b, 42), 0);
    ASSERT_EQ(PostSend(a, 1, IBV_WR_RDMA_WRITE, mr_a, buffer_a.data(), 64, address, rkey), 0);
    ASSERT_EQ(PostSend(a, 2, IBV_WR_RDMA_WRITE, mr_a, buffer_a.data(), 8, base, mr_b->rkey), 0);
    const auto sent = Poll(a, 2);
    ASSERT_EQ(sent.size(), 2u);
    EXPECT_EQ(sent[0].status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(sent[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(a.qp->state, IBV_QPS_ERR);
    EXPECT_EQ(std::count(buffer_b.begin(), buffer_b.end(), 0x77), 0);
    const auto flushed = Poll(b, 1);
    ASSERT_EQ(flushed.size(), 1u);
    EXPECT_EQ(flushed[0].wr_id, 42u);
    EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(b.qp->state, IBV_QPS_ERR);
    v->dereg_mr(local_only);
  }
}

TEST_F(EmulatedVerbsTest, NoReceivePostedExhaustsRnrRetries) {
  Pair(20, /*rnr_retry=*/2);
  ASSERT_EQ(PostSend(a, 1, IBV_WR_SEND, mr_a, buffer_a.data(), 16), 0);
  const auto sent = Poll(a, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(a.qp->state, IBV_QPS_ERR);
}

TEST_F(EmulatedVerbsTest, RnrRetriesSucceedOnceAReceiveIsPosted) {
  Pair(20, /*rnr_retry=*/7);
  ASSERT_EQ(PostSend(a, 1, IBV_WR_SEND, mr_a, buffer_a.data(), 16), 0);
  ASSERT_EQ(PostSend(a, 2, IBV_WR_SEND, mr_a, buffer_a.data(), 16), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_TRUE(Poll(a, 1, 10).empty());
  ASSERT_EQ(PostRecv(b, 5, mr_b, buffer_b.data(), 64), 0);
  ASSERT_EQ(PostRecv(b, 6, mr_b, buffer_b.data() + 64, 64), 0);
  const auto sent = Poll(a, 2);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[1].status, IBV_WC_SUCCESS);
  const auto received = Poll(b, 2);
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].wr_id, 5u);
  EXPECT_EQ(received[1].wr_id, 6u);
}

TEST_F(EmulatedVerbsTest, ReceiveTooSmallIsALengthErrorOnBothSides) {
  Pair();
  ASSERT_EQ(PostRecv(b, 5, mr_b, buffer_b.data(), 8), 0);
  ASSERT_EQ(PostSend(a, 1, IBV_WR_SEND, mr_a, buffer_a.data(), 64), 0);
  const auto sent = Poll(a, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_REM_INV_REQ_ERR);
  const auto received = Poll(b, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].status, IBV_WC_LOC_LEN_ERR);
}

// A peer that stops answering (here: its queue pair is gone) fails the request after (retry_cnt + 1) local ACK
// timeouts: exponent 12 is 16.8 ms per attempt, 134 ms for 8.
TEST_F(EmulatedVerbsTest, SilentPeerExceedsTheTransportRetries) {
  Pair(/*timeout_exponent=*/12);
  v->destroy_qp(b.qp);
  b.qp = nullptr;
  const auto start = Clock::now();
  ASSERT_EQ(PostSend(a, 1, IBV_WR_RDMA_WRITE, mr_a, buffer_a.data(), 8, reinterpret_cast<uint64_t>(buffer_b.data()),
                     mr_b->rkey),
            0);
  const auto sent = Poll(a, 1);
  const auto elapsed = Clock::now() - start;
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_GE(elapsed, std::chrono::milliseconds(130));
  EXPECT_LT(elapsed, std::chrono::milliseconds(2000));
}

TEST_F(EmulatedVerbsTest, TransitionsNeedTheSpecAttributes) {
  a = MakeQp();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.dest_qp_num = 5;
  EXPECT_NE(v->modify_qp(a.qp, &attr, IBV_QP_STATE | IBV_QP_DEST_QPN), 0);
  EXPECT_EQ(a.qp->state, IBV_QPS_INIT);
  // Sending before RTS is refused at post time.
  EXPECT_NE(PostSend(a, 1, IBV_WR_SEND, mr_a, buffer_a.data(), 8), 0);
}

TEST_F(EmulatedVerbsTest, CompletionChannelFiresWhenArmed) {
  Fixture& f = Open();
  ibv_comp_channel* channel = v->create_comp_channel(f.context);
  ASSERT_NE(channel, nullptr);
  a.cq = v->create_cq(f.context, 16, this, channel, 0);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = a.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {8, 8, 1, 1, 0};
  a.qp = v->create_qp(f.pd, &init);
  b = MakeQp();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  ASSERT_EQ(v->modify_qp(a.qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  Connect(a, b.qp->qp_num);
  Connect(b, a.qp->qp_num);
  ASSERT_EQ(v->req_notify_cq(a.cq, 0), 0);
  ASSERT_EQ(PostRecv(a, 3), 0);
  ASSERT_EQ(PostSend(b, 1, IBV_WR_RDMA_WRITE_WITH_IMM, mr_a, buffer_a.data(), 0, 0, 0, 1), 0);
  ibv_cq* fired = nullptr;
  void* context = nullptr;
  ASSERT_EQ(v->get_cq_event(channel, &fired, &context), 0);  // blocking read on the channel's fd
  EXPECT_EQ(fired, a.cq);
  EXPECT_EQ(context, this);
  v->ack_cq_events(fired, 1);
  const auto received = Poll(a, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  v->destroy_qp(a.qp);
  v->destroy_cq(a.cq);
  a = {};
  v->destroy_comp_channel(channel);
}

}  // namespace
}  // namespace curelay::transport
