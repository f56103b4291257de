#include "backend/metrics/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <utility>

#include "backend/metrics/listen_address.h"
#include "backend/metrics/prometheus_text.h"

namespace curelay::backend {
namespace {

// Scrapes are rare and quick: two workers let a second scraper (or a curl) through while one connection idles.
constexpr size_t kWorkerThreads = 2;
// One request per connection: a scraper reconnects every interval anyway, and an idle keep-alive connection would
// hold a worker, and Stop(), for the keep-alive timeout.
constexpr size_t kRequestsPerConnection = 1;
// How long a connected client may take to send its request; bounds Stop() when one connects and stays silent.
constexpr time_t kFirstRequestTimeoutSeconds = 2;

}  // namespace

MetricsServer::MetricsServer(std::function<MetricsSnapshot()> snapshot) : snapshot_(std::move(snapshot)) {}

MetricsServer::~MetricsServer() { Stop(); }

MetricsSnapshot MetricsServer::TakeSnapshot() {
  std::lock_guard<std::mutex> lock(snapshot_mutex_);
  return snapshot_();
}

bool MetricsServer::Start(const std::string& host, int port, std::string* error) {
  const std::string address = FormatListenAddress(host, port);
  if (server_) {
    *error = "metrics server already serves on port " + std::to_string(port_);
    return false;
  }
  if (port < 0 || port > 65535) {
    *error = "metrics listen address " + address + ": the port must be from 0 to 65535";
    return false;
  }
  auto server = std::make_unique<httplib::Server>();
  server->new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  server->set_keep_alive_max_count(kRequestsPerConnection);
  server->set_keep_alive_timeout(kFirstRequestTimeoutSeconds);
  // httplib sets SO_REUSEPORT by default, which would let a second backend bind the same port and take half the
  // scrapes. SO_REUSEADDR alone still lets a restarted backend rebind past TIME_WAIT, but a live listener wins.
  server->set_socket_options([](socket_t fd) {
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(RenderPrometheusText(TakeSnapshot()), std::string(kPrometheusTextContentType));
  });
  // httplib would echo the exception's text in a response header; the endpoint is unauthenticated, so say less.
  server->set_exception_handler([](const httplib::Request&, httplib::Response& response, std::exception_ptr) {
    response.status = 500;
    response.set_content("metrics snapshot failed\n", "text/plain; charset=utf-8");
  });

  errno = 0;
  const int bound = port == 0 ? server->bind_to_any_port(host) : (server->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    const int bind_errno = errno;
    *error = "metrics endpoint cannot listen on " + address +
             (bind_errno != 0 ? std::string(": ") + std::strerror(bind_errno) : std::string(": cannot resolve host"));
    return false;
  }

  server_ = std::move(server);
  port_ = bound;
  accept_loop_done_ = false;
  thread_ = std::thread([this, server = server_.get()] {
    server->listen_after_bind();
    accept_loop_done_ = true;
  });
  // httplib's stop() does nothing until the accept loop has begun; wait for it, so a Stop() right after Start()
  // is not lost (which would leave join() waiting forever). The loop may also have ended already, on an accept
  // error.
  while (!server_->is_running() && !accept_loop_done_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return true;
}

void MetricsServer::Stop() {
  if (!server_) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
  port_ = 0;
}

}  // namespace curelay::backend
