// ZeroMQ's own round trip, the floor under curelay's tcp:// path: a PAIR ping-pong of 64-byte messages between two
// ZeroMQ contexts of this process over loopback tcp, with the same static libzmq the shim links. Printed as METRIC
// lines next to curelay's own in bench/run.sh.
//
// Usage: curelay_zmq_pingpong [round-trips]
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void Metric(const char* name, double value) { std::printf("METRIC %s %.3f us\n", name, value); }

double Median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

double P99(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[std::min(samples.size() - 1, samples.size() * 99 / 100)];
}

// Receives one message; spinning (non-blocking receives in a loop) or blocking in zmq_recv.
bool Receive(void* socket, char* buffer, bool spin) {
  if (!spin) return zmq_recv(socket, buffer, 64, 0) >= 0;
  for (;;) {
    if (zmq_recv(socket, buffer, 64, ZMQ_DONTWAIT) >= 0) return true;
    if (zmq_errno() != EAGAIN) return false;
  }
}

std::vector<double> PingPong(int round_trips, bool spin) {
  void* server_context = zmq_ctx_new();
  void* client_context = zmq_ctx_new();
  void* server = zmq_socket(server_context, ZMQ_PAIR);
  void* client = zmq_socket(client_context, ZMQ_PAIR);
  zmq_bind(server, "tcp://127.0.0.1:*");
  char endpoint[256];
  size_t size = sizeof(endpoint);
  zmq_getsockopt(server, ZMQ_LAST_ENDPOINT, endpoint, &size);
  zmq_connect(client, endpoint);
  std::thread echo([&] {
    char buffer[64];
    for (int i = 0; i < round_trips + 100; ++i) {
      if (!Receive(server, buffer, spin)) return;
      zmq_send(server, buffer, 64, 0);
    }
  });
  std::vector<double> samples;
  char buffer[64] = {};
  for (int i = 0; i < round_trips + 100; ++i) {
    const auto start = Clock::now();
    zmq_send(client, buffer, 64, 0);
    Receive(client, buffer, spin);
    if (i >= 100) samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  echo.join();
  const int linger = 0;
  zmq_setsockopt(client, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_setsockopt(server, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(client);
  zmq_close(server);
  zmq_ctx_term(client_context);
  zmq_ctx_term(server_context);
  return samples;
}

}  // namespace

int main(int argc, char** argv) {
  const int round_trips = argc > 1 ? std::atoi(argv[1]) : 5000;
  const auto blocking = PingPong(round_trips, false);
  const auto spinning = PingPong(round_trips, true);
  Metric("zmq_tcp_rtt_blocking_median", Median(blocking));
  Metric("zmq_tcp_rtt_blocking_p99", P99(blocking));
  Metric("zmq_tcp_rtt_spinning_median", Median(spinning));
  Metric("zmq_tcp_rtt_spinning_p99", P99(spinning));
  return 0;
}
