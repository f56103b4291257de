// The backend's front door: verifies each client's Hello, admits it, hands it an executor of its own and
// answers with that executor's endpoint. After this one exchange the client never talks to the broker again.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "backend/executor_pool.h"
#include "transport/listener.h"

namespace curelay::backend {

struct BrokerSettings {
  std::vector<std::string> listen_endpoints;
  ExecutorSettings executors;
  int pending_timeout_ms = 60000;  // a Hello waits this long for an executor before it is refused
};

class Broker {
 public:
  explicit Broker(BrokerSettings settings);
  // Runs until `stop` becomes true. Returns false if the endpoints cannot be bound.
  bool Run(const std::atomic<bool>& stop);

 private:
  struct PendingHello {
    transport::ListenerRequest request;
    int64_t deadline_ms = 0;
  };

  void HandleHello(transport::ListenerRequest request);
  void ServePending();
  void Refuse(const transport::ListenerRequest& request, CUresult result, const std::string& message);
  void Admit(const transport::ListenerRequest& request, ExecutorProcess& executor);

  BrokerSettings settings_;
  std::unique_ptr<transport::Listener> listener_;
  ExecutorPool pool_;
  std::deque<PendingHello> pending_;
  uint64_t next_session_ = 1;
};

}  // namespace curelay::backend
