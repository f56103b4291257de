// The backend's Prometheus endpoint: answers `GET /metrics` (and HEAD) with the text rendering of a fresh
// snapshot; every other path gets 404. It serves on threads of its own, so a slow scraper never delays the
// broker or the scheduler.
//
// Threading: the snapshot callback runs on one of the server's worker threads, never on the caller's, so it must
// be safe against everything else in the backend (take the locks it needs, read atomics). The server calls it
// one call at a time. If it throws, the scrape gets 500 and the server carries on.
//
// The HTTP side is cpp-httplib, header-only and included only by metrics_server.cc, so the backend gains no
// shared library (see tools/fetch-httplib.sh) and users of this header do not compile httplib.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backend/metrics/metrics_snapshot.h"

namespace httplib {
class Server;
}

namespace curelay::backend {

class MetricsServer {
 public:
  explicit MetricsServer(std::function<MetricsSnapshot()> snapshot);
  ~MetricsServer();  // stops
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds host:port and starts serving. `port` 0 takes a free port (see port()). Returns false, with the reason
  // in `*error`, when the address cannot be bound or the server already runs; nothing is left running then.
  bool Start(const std::string& host, int port, std::string* error);

  // The bound port while serving; 0 when not.
  int port() const { return port_; }

  // Closes the listening socket, so new connections are refused, and waits for requests in progress to finish.
  // Idempotent. Not to be called concurrently with Start().
  void Stop();

 private:
  MetricsSnapshot TakeSnapshot();

  std::function<MetricsSnapshot()> snapshot_;
  std::mutex snapshot_mutex_;  // serializes snapshot_ calls across worker threads
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;  // the accept loop
  std::atomic<bool> accept_loop_done_{false};
  int port_ = 0;
};

}  // namespace curelay::backend
