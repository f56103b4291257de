// The far end of the RDMA channel tests, a separate process (fork/exec): 
//   rdma_peer echo ENDPOINT          connects and sends every message back until the channel ends
//   rdma_peer hold ENDPOINT          connects, answers one message, then waits to be killed
//   rdma_peer raw ENDPOINT KIND      brings up a bare queue pair, writes one bad fragment (KIND: prefix,
//                                    oversized, bulk, rkey, outside), prints what its own side saw, and waits to be killed
//   rdma_peer deaf ENDPOINT          brings up a bare queue pair and sends heartbeats, but never takes what arrives
//                                    (its receives are used up, never posted again), until killed
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "transport/channel.h"
#include "transport/endpoint.h"
#include "transport/rdma/rdma_link.h"

using namespace curelay::transport;

namespace {

int Echo(const std::string& endpoint, bool hold) {
  std::string error;
  ChannelOptions options;
  auto channel = ConnectChannel(endpoint, options, &error);
  if (channel == nullptr) {
    fprintf(stderr, "rdma_peer: %s\n", error.c_str());
    return 2;
  }
  for (;;) {
    IncomingMessage message;
    const ReceiveStatus status = channel->Receive(message, -1);
    if (status != ReceiveStatus::kMessage) return status == ReceiveStatus::kPeerLost ? 0 : 3;
    if (!channel->Send(message.header.bytes(), message.payload.bytes())) return 4;
    if (hold) pause();
  }
}

int Raw(const std::string& endpoint, const std::string& kind) {
  const auto parsed = Endpoint::Parse(endpoint);
  std::string error;
  auto link = RdmaLink::Connect(parsed->host, parsed->port, RdmaSettingsFromEnvironment({}), &error);
  if (link == nullptr) {
    fprintf(stderr, "rdma_peer: %s\n", error.c_str());
    return 2;
  }
  const VerbsApi& verbs = link->verbs();
  uint8_t* slot = link->staging();
  uint32_t length = 64, immediate = 64, rkey = link->peer().ring_rkey;
  uint64_t offset = 0;
  std::memset(slot, 0x5c, link->peer().slot_bytes);
  if (kind == "prefix") {
    // Garbage where the message prefix belongs.
  } else if (kind == "bulk") {
    // A bulk message (payload already in the receiver's bulk region) claiming more than that region holds.
    const uint32_t words[4] = {0x6d736732, 8, link->peer().bulk_bytes + 4096, 0};
    std::memcpy(slot, words, sizeof(words));
  } else if (kind == "oversized") {
    immediate = link->peer().slot_bytes + 1;  // claims more than a slot holds
  } else if (kind == "rkey") {
    rkey ^= 0x1234;
  } else if (kind == "outside") {
    offset = uint64_t{link->peer().slot_bytes} * link->peer().slot_count;  // just past the ring
  }
  ibv_sge sge{reinterpret_cast<uint64_t>(slot), length, link->staging_lkey()};
  ibv_send_wr work{};
  work.sg_list = &sge;
  work.num_sge = 1;
  work.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  work.send_flags = IBV_SEND_SIGNALED;
  work.imm_data = htonl(immediate);
  work.wr.rdma.remote_addr = link->peer().ring_address + offset;
  work.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  if (verbs.post_send(link->qp(), &work, &bad) != 0) return 5;
  ibv_wc wc{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (verbs.poll_cq(link->cq(), 1, &wc) == 0) {
    if (std::chrono::steady_clock::now() > deadline) return 6;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  printf("%s\n", wc.status == IBV_WC_SUCCESS ? "success" : wc.status == IBV_WC_REM_ACCESS_ERR ? "remote-access-error"
                                                                                             : "other-error");
  fflush(stdout);
  // Alive, socket open: the far side must find out from its own queue pair, not from this process going away.
  for (;;) pause();
}

int Deaf(const std::string& endpoint) {
  const auto parsed = Endpoint::Parse(endpoint);
  std::string error;
  auto link = RdmaLink::Connect(parsed->host, parsed->port, RdmaSettingsFromEnvironment({}), &error);
  if (link == nullptr) {
    fprintf(stderr, "rdma_peer: %s\n", error.c_str());
    return 2;
  }
  // Zero-credit writes with immediate (heartbeats) every 50 ms keep the far side from timing this peer out, so only
  // its receive-not-ready naks can end the channel. The completion queue is never polled.
  for (;;) {
    ibv_send_wr work{};
    work.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    work.imm_data = htonl(kCreditFlag);
    work.wr.rdma.remote_addr = link->peer().ring_address;
    work.wr.rdma.rkey = link->peer().ring_rkey;
    ibv_send_wr* bad = nullptr;
    if (link->verbs().post_send(link->qp(), &work, &bad) != 0) return 5;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "echo") == 0) return Echo(argv[2], false);
  if (argc >= 3 && std::strcmp(argv[1], "hold") == 0) return Echo(argv[2], true);
  if (argc >= 4 && std::strcmp(argv[1], "raw") == 0) return Raw(argv[2], argv[3]);
  if (argc >= 3 && std::strcmp(argv[1], "deaf") == 0) return Deaf(argv[2]);
  fprintf(stderr, "usage: rdma_peer echo|hold|deaf ENDPOINT | raw ENDPOINT KIND\n");
  return 1;
}
