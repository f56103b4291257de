// Host functions (cuLaunchHostFunc, cuStreamAddCallback) run in this process, in stream order: the executor puts a
// driver host function on the stream that holds it at a gate of a board shared with this process, and a thread
// here waits for the gate, runs the application's function and opens the gate again
// (transport/shm/host_function_board.h). Without shared memory (tcp://) the executor's driver callback sends a
// notice (a reply to a sequence number registered here beforehand) and holds the stream until this process sends
// HostFunctionReturned; the waiting thread here reads the channel itself while it waits, so a host function runs
// even when the application makes no other CUDA call.
// Graph host nodes (cuGraphAddHostNode, or cuLaunchHostFunc captured) work the same way with tickets that each
// launch brings (host_functions.h).
#include "frontend/api/host_functions.h"

#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "frontend/api/api_support.h"
#include "frontend/api/graph_support.h"
#include "frontend/client/log.h"
#include "transport/shm/host_function_board.h"
#include "transport/shm/shared_file.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

using transport::GateWord;

// The session's board, set up at the first host function (per client: a forked child has its own session).
CUresult Board(Client& client, GateWord** gates) {
  static std::mutex mutex;
  static Client* owner = nullptr;
  static GateWord* board = nullptr;
  static CUresult status = CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(mutex);
  if (owner != &client) {
    owner = &client;
    board = nullptr;
    status = CUDA_SUCCESS;
    {
      std::string path, error;
      void* mapping = transport::CreateSharedFile(client.same_host_directory(), transport::kHostFunctionBoardPrefix,
                                                  transport::kHostFunctionBoardBytes, &path, &error);
      if (mapping == nullptr) {
        Log().warn("host functions: cannot create the gate board: {}", error);
        status = CUDA_ERROR_OUT_OF_MEMORY;
      } else {
        auto& builder = Builder();
        const auto call = wire::CreateHostFunctionBoard(builder, builder.CreateString(path)).Union();
        status = client.Call(builder, wire::Call::HostFunctionBoard, call, {}, nullptr);
        unlink(path.c_str());  // normally the executor already did
        board = static_cast<GateWord*>(mapping);  // kept mapped: gates may be in use until the process ends
      }
    }
  }
  *gates = board;
  return status;
}

// An idle gate, claimed. All 1024 busy means that many host functions wait on their streams: wait for one (null if
// the session breaks meanwhile).
GateWord* ClaimGate(const Client& client, GateWord* board, uint32_t* index) {
  static std::atomic<uint32_t> next{0};
  while (client.broken_result() == CUDA_SUCCESS) {
    for (size_t tries = 0; tries < transport::kHostFunctionGates; ++tries) {
      const uint32_t i = next.fetch_add(1) % transport::kHostFunctionGates;
      uint32_t idle = transport::kGateIdle;
      if (board[i].compare_exchange_strong(idle, transport::kGateLaunched)) {
        *index = i;
        return &board[i];
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return nullptr;
}

// Over tcp://: the executor's notice says the stream has reached the function.
CUresult LaunchRemoteHostFunction(Client* client, uint64_t wire_stream, std::function<void()> body) {
  auto notice = std::make_shared<Client::Notice>(*client);
  auto& builder = Builder();
  const auto call = wire::CreateLaunchHostFunction(builder, wire_stream, 0, notice->sequence()).Union();
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::LaunchHostFunction, call, {}, nullptr));
  std::thread([client, notice, body = std::move(body)] {
    if (notice->Await() != CUDA_SUCCESS) return;  // the session is gone: the stream will never get there
    body();
    auto& reply = Builder();
    const auto returned = wire::CreateHostFunctionReturned(reply, notice->sequence()).Union();
    client->Post(reply, wire::Call::HostFunctionReturned, returned, {});
  }).detach();
  return CUDA_SUCCESS;
}

// cuLaunchHostFunc on a capturing stream: a host node of the capture, which runs at each launch of the graph.
CUresult CaptureHostFunction(Client& client, uint64_t wire_stream, CUhostFn function, void* user_data) {
  auto& builder = Builder();
  const auto call =
      wire::CreateLaunchHostFunction(builder, wire_stream, 0, 0, HostFunctionId(function, user_data)).Union();
  return client.Call(builder, wire::Call::LaunchHostFunction, call, {}, nullptr);
}

// `captured`: the function and its data when a capture may take it as a host node (cuLaunchHostFunc; the driver
// refuses cuStreamAddCallback in a capture).
CUresult LaunchHostFunction(CUstream stream, std::function<void()> body, CUhostFn captured = nullptr,
                            void* captured_data = nullptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  uint64_t wire_stream = 0;
  CURELAY_RETURN_IF_ERROR(WireStream(*client, stream, &wire_stream));
  if (captured != nullptr && CapturesActive()) {
    CUgraph graph = nullptr;
    CURELAY_RETURN_IF_ERROR(CaptureGraphOf(*client, stream, &graph));
    if (graph != nullptr) return CaptureHostFunction(*client, wire_stream, captured, captured_data);
  }
  if (client->remote()) return LaunchRemoteHostFunction(client, wire_stream, std::move(body));
  GateWord* board = nullptr;
  CURELAY_RETURN_IF_ERROR(Board(*client, &board));
  uint32_t index = 0;
  GateWord* gate = ClaimGate(*client, board, &index);
  if (gate == nullptr) return client->broken_result();
  auto& builder = Builder();
  const auto call = wire::CreateLaunchHostFunction(builder, wire_stream, index).Union();
  // A round trip, so that a refusal (a capturing stream, say) is this call's result, as with the driver.
  if (const CUresult result = client->Call(builder, wire::Call::LaunchHostFunction, call, {}, nullptr);
      result != CUDA_SUCCESS) {
    gate->store(transport::kGateIdle);
    return result;
  }
  // One thread per host function: a function waiting for its stream never holds up another stream's.
  std::thread([client, gate, body = std::move(body)] {
    while (gate->load() == transport::kGateLaunched) {
      if (client->broken_result() != CUDA_SUCCESS) return;  // the session is gone: nothing will reach the gate
      transport::WaitGate(gate, transport::kGateLaunched, 100);
    }
    if (gate->load() != transport::kGateReached) return;
    body();
    gate->store(transport::kGateReturned);
    transport::WakeGate(gate);
  }).detach();
  return CUDA_SUCCESS;
}

// The application's host functions by id (never forgotten: an executable graph may run one long after its graph
// went; the same pair keeps its id, so the table grows only with distinct pairs).
struct HostFunctionTable {
  std::mutex mutex;
  std::map<std::pair<CUhostFn, void*>, uint64_t> ids;
  std::map<uint64_t, std::pair<CUhostFn, void*>> functions;
};

HostFunctionTable& HostFunctions() {
  static auto* table = new HostFunctionTable;  // never destroyed: threads may run functions during exit
  return *table;
}

// Runs the host function `id` names for a graph host node (an unknown id is a broken executor's: nothing runs).
void RunHostFunction(uint64_t id) {
  CUhostFn function = nullptr;
  void* user_data = nullptr;
  if (!FindHostFunction(id, &function, &user_data)) {
    Log().error("a graph host node named host function {}, which this process never gave out", id);
    return;
  }
  function(user_data);
}

}  // namespace

namespace curelay::frontend {

uint64_t HostFunctionId(CUhostFn function, void* user_data) {
  HostFunctionTable& table = HostFunctions();
  std::lock_guard<std::mutex> lock(table.mutex);
  const auto [found, added] = table.ids.try_emplace({function, user_data}, table.ids.size() + 1);
  if (added) table.functions.emplace(found->second, found->first);
  return found->second;
}

bool FindHostFunction(uint64_t id, CUhostFn* function, void** user_data) {
  HostFunctionTable& table = HostFunctions();
  std::lock_guard<std::mutex> lock(table.mutex);
  const auto found = table.functions.find(id);
  if (found == table.functions.end()) return false;
  *function = found->second.first;
  *user_data = found->second.second;
  return true;
}

CUresult LaunchInternalHostFunction(CUstream stream, std::function<void()> body) {
  return LaunchHostFunction(stream, std::move(body));
}

CUresult HostNodeTickets::Prepare(Client& client, size_t count) {
  client_ = &client;
  if (client.remote()) {
    for (size_t i = 0; i < count; ++i) {
      notices_.push_back(std::make_shared<Client::Notice>(client));
      notice_numbers_.push_back(notices_.back()->sequence());
    }
    return CUDA_SUCCESS;
  }
  // More gates than half the board would keep cuLaunchHostFunc waiting for the launch's own gates.
  if (count > transport::kHostFunctionGates / 2) {
    Log().warn("a graph with {} host nodes is not supported (at most {})", count, transport::kHostFunctionGates / 2);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  GateWord* board = nullptr;
  CURELAY_RETURN_IF_ERROR(Board(client, &board));
  for (size_t i = 0; i < count; ++i) {
    uint32_t index = 0;
    if (ClaimGate(client, board, &index) == nullptr) return client.broken_result();
    gates_.push_back(index);
  }
  return CUDA_SUCCESS;
}

namespace {

// A graph host node's function, with the staged copies it depends on delivered first (graph_host_copies.cc).
void RunGraphHostFunction(uint64_t function) {
  BeforeGraphHostFunction(function);
  RunHostFunction(function);
  AfterGraphHostFunction(function);
}

}  // namespace

void HostNodeTickets::Start() {
  started_ = true;
  Client* client = client_;
  for (auto& notice : notices_) {
    std::thread([client, notice = std::move(notice)] {
      if (notice->Await() != CUDA_SUCCESS) return;  // the session is gone: no node will take the ticket
      const auto* value = notice->reply().reply != nullptr ? notice->reply().reply->body_as_IntegerValue() : nullptr;
      if (value != nullptr) RunGraphHostFunction(static_cast<uint64_t>(value->value()));
      auto& reply = Builder();
      const auto returned = wire::CreateHostFunctionReturned(reply, notice->sequence()).Union();
      client->Post(reply, wire::Call::HostFunctionReturned, returned, {});
    }).detach();
  }
  if (gates_.empty()) return;
  GateWord* board = nullptr;
  if (Board(*client, &board) != CUDA_SUCCESS) return;
  for (uint32_t index : gates_) {
    std::thread([client, board, index] {
      GateWord* gate = &board[index];
      while (gate->load() == transport::kGateLaunched) {
        if (client->broken_result() != CUDA_SUCCESS) return;  // the session is gone: nothing will reach the gate
        transport::WaitGate(gate, transport::kGateLaunched, 100);
      }
      if (gate->load() != transport::kGateReached) return;
      RunGraphHostFunction(transport::GateFunctions(board)[index].load());
      gate->store(transport::kGateReturned);
      transport::WakeGate(gate);
    }).detach();
  }
}

HostNodeTickets::~HostNodeTickets() {
  if (started_ || gates_.empty()) return;  // unstarted notices unregister as they go
  GateWord* board = nullptr;
  if (Board(*client_, &board) != CUDA_SUCCESS) return;
  for (uint32_t index : gates_) board[index].store(transport::kGateIdle);
}

}  // namespace curelay::frontend

extern "C" {

CUresult cuLaunchHostFunc(CUstream stream, CUhostFn function, void* user_data) {
  if (function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return LaunchHostFunction(stream, [function, user_data] { function(user_data); }, function, user_data);
}

// The driver's older form: the callback also gets the stream and the stream's status (no error reaches it here:
// work that failed fails the session's next synchronizing call instead).
CUresult cuStreamAddCallback(CUstream stream, CUstreamCallback callback, void* user_data, unsigned int flags) {
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return LaunchHostFunction(stream, [stream, callback, user_data] { callback(stream, CUDA_SUCCESS, user_data); });
}

}  // extern "C"
