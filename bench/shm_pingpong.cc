// The shared-memory channel's own floor under curelay's same-host (ipc://) path: two processes, as a client and its
// executor are, exchange messages over transport::CreateShmChannel/OpenShmChannel with a ZeroMQ ipc:// liveness
// channel underneath, both sides spinning as a waiting client and a serving executor do. Round trips of a small
// request and a small answer (an idle synchronize's shape) and of a small request and an answer carrying 4 KiB (a
// small device-to-host copy's shape), medians and p99 over many, printed as METRIC lines next to curelay's own in
// bench/run.sh.
//
// Usage: curelay_shm_pingpong [round-trips]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "transport/channel.h"
#include "transport/shm/shm_channel.h"

namespace {

using Clock = std::chrono::steady_clock;
using curelay::transport::Channel;
using curelay::transport::IncomingMessage;
using curelay::transport::ReceiveStatus;

constexpr size_t kRequestBytes = 64, kAnswerBytes = 48, kPayloadBytes = 4096;

double Quantile(std::vector<double> samples, double q) {
  std::sort(samples.begin(), samples.end());
  return samples[std::min(samples.size() - 1, static_cast<size_t>(q * static_cast<double>(samples.size())))];
}

bool ReceiveOne(Channel& channel, IncomingMessage& message) {
  return channel.Receive(message, -1) == ReceiveStatus::kMessage;
}

// The executor's side: answers each request; the request's first byte says whether the answer carries 4 KiB.
int Serve(const std::string& endpoint, const std::string& directory) {
  std::string error;
  std::shared_ptr<Channel> liveness = curelay::transport::ConnectChannel(endpoint, {}, &error);
  if (liveness == nullptr) return 3;
  liveness->Send(std::vector<uint8_t>{1}, {});  // the executor side binds; the first message makes this the peer
  IncomingMessage offer;
  if (!ReceiveOne(*liveness, offer)) return 4;
  const std::string path(reinterpret_cast<const char*>(offer.header.bytes().data()), offer.header.size());
  std::unique_ptr<Channel> channel = curelay::transport::OpenShmChannel(liveness, path, directory, {}, &error);
  if (channel == nullptr) {
    std::fprintf(stderr, "open: %s\n", error.c_str());
    return 5;
  }
  const std::vector<uint8_t> answer(kAnswerBytes, 0x11), payload(kPayloadBytes, 0x22);
  IncomingMessage request;
  for (;;) {
    const ReceiveStatus status = channel->Receive(request, -1);
    if (status == ReceiveStatus::kPeerLost) return 0;
    if (status != ReceiveStatus::kMessage) return 6;
    const uint8_t kind = request.header.bytes()[0];
    if (kind == 0xFF) return 0;
    if (!channel->Send(answer, kind == 1 ? std::span<const uint8_t>(payload) : std::span<const uint8_t>())) return 7;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int round_trips = argc > 1 ? std::atoi(argv[1]) : 100'000;
  char directory_template[] = "/tmp/curelay-shm-pingpong-XXXXXX";
  const char* made = mkdtemp(directory_template);
  if (made == nullptr || round_trips <= 0) return 2;
  const std::string directory = made, endpoint = "ipc://" + directory + "/liveness.sock";
  std::string error;
  const std::string endpoints[] = {endpoint};
  std::shared_ptr<Channel> liveness = curelay::transport::BindChannel(endpoints, {}, &error);
  if (liveness == nullptr) {
    std::fprintf(stderr, "bind: %s\n", error.c_str());
    return 2;
  }
  const pid_t server = fork();
  if (server == 0) _exit(Serve(endpoint, directory));
  IncomingMessage hello;
  if (!ReceiveOne(*liveness, hello)) return 3;
  std::string path;
  std::unique_ptr<Channel> channel = curelay::transport::CreateShmChannel(liveness, directory, {}, &path, &error);
  if (channel == nullptr) {
    std::fprintf(stderr, "create: %s\n", error.c_str());
    return 3;
  }
  liveness->Send(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(path.data()), path.size()), {});

  std::vector<uint8_t> request(kRequestBytes, 0);
  IncomingMessage answer;
  int status = 0;
  for (const uint8_t kind : {uint8_t{0}, uint8_t{1}}) {
    request[0] = kind;
    std::vector<double> us;
    us.reserve(static_cast<size_t>(round_trips));
    for (int i = 0; i < round_trips + round_trips / 10 && status == 0; ++i) {
      const auto start = Clock::now();
      if (!channel->Send(request, {}) || !ReceiveOne(*channel, answer) ||
          answer.payload.size() != (kind == 1 ? kPayloadBytes : 0)) {
        status = 4;
        break;
      }
      if (i >= round_trips / 10) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    if (status != 0) break;
    const char* name = kind == 1 ? "shm_roundtrip_4KiB_answer" : "shm_roundtrip_small";
    std::printf("METRIC %s_median %.3f us\nMETRIC %s_p99 %.3f us\n", name, Quantile(us, 0.5), name, Quantile(us, 0.99));
  }
  request[0] = 0xFF;
  channel->Send(request, {});
  int child = 0;
  waitpid(server, &child, 0);
  liveness.reset();
  unlink((directory + "/liveness.sock").c_str());
  rmdir(directory.c_str());
  if (status != 0 || !WIFEXITED(child) || WEXITSTATUS(child) != 0) {
    std::fprintf(stderr, "ping-pong failed (client %d, server %d)\n", status, child);
    return 1;
  }
  return 0;
}
