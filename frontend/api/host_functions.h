// Host functions in graphs (frontend/api/host_functions.cc). A graph's host node names the application's function
// and userData by an id the client assigns (the same pair always gets the same id; both stay in this process).
// Each launch of an executable graph with host nodes brings one ticket per node: a thread per ticket waits until a
// node of the launch takes it, runs the function that node names, and lets the node's stream go on.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "frontend/client/client.h"

namespace curelay::frontend {

uint64_t HostFunctionId(CUhostFn function, void* user_data);
// False for an id this process never gave out.
bool FindHostFunction(uint64_t id, CUhostFn* function, void** user_data);

// Runs `body` in this process once the work before it on `stream` is done (as cuLaunchHostFunc, for the client's
// own purposes; `stream` must not capture).
CUresult LaunchInternalHostFunction(CUstream stream, std::function<void()> body);

// One launch's tickets: gates of the board (same host) or notices (over tcp://).
class HostNodeTickets {
 public:
  HostNodeTickets() = default;
  HostNodeTickets(const HostNodeTickets&) = delete;
  HostNodeTickets& operator=(const HostNodeTickets&) = delete;
  // Gives back what was not started.
  ~HostNodeTickets();

  CUresult Prepare(Client& client, size_t count);
  const std::vector<uint32_t>& gates() const { return gates_; }
  const std::vector<uint64_t>& notices() const { return notice_numbers_; }
  // After the executor took the launch: a thread per ticket, which runs the host function the node names (with the
  // deliveries of graph_support.h's BeforeGraphHostFunction/AfterGraphHostFunction around it).
  void Start();

 private:
  Client* client_ = nullptr;
  std::vector<uint32_t> gates_;
  std::vector<std::shared_ptr<Client::Notice>> notices_;
  std::vector<uint64_t> notice_numbers_;
  bool started_ = false;
};

}  // namespace curelay::frontend
