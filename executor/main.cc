// curelay-executor: owns one client session's real CUDA context. Started by curelay-backend (never by hand),
// it loads the driver, binds its session endpoints, reports READY on the control descriptor, waits to be given a
// session, serves that one client, and exits, which returns every GPU resource of the session to the driver.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "executor/driver.h"
#include "executor/session.h"
#include "backend/executor_control.h"
#include "executor/backend_link.h"
#include "common/gpu_list.h"
#include "common/logging.h"
#include "schema/wire.h"
#include "transport/channel.h"
#include "transport/endpoint.h"
#include "transport/zmq/zmq_curve.h"

namespace {

// How long an ended session's teardown may wait for the GPU before the process gives up on it, and the exit status
// it then ends with.
constexpr std::chrono::seconds kTeardownDeadline{10};
constexpr int kTeardownTimedOutStatus = 3;

struct Options {
  std::string driver_path;
  std::vector<std::string> bind_endpoints;
  int control_fd = -1;
  std::string log_level = "info";
  std::vector<int> host_gpus;  // the host GPU index of each device its driver shows; empty: the same numbers
  int heartbeat_timeout_ms = 5000;  // the client is gone after this long without a sign of life
  bool mps_client = false;          // started as a client of the backend's MPS server (spatial sharing)
  std::string curve_secret_file;    // CURVE on its tcp endpoint: the backend's secret key (docs/security.md)
  std::string swap_space;           // the backend's swap space (memory turns, docs/scheduling.md), and its size
  uint64_t swap_space_bytes = 0;
  std::string nvml_path;            // the host's NVML for DeviceFacts; empty: none
};

bool ParseOptions(int argc, char** argv, Options* options) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--driver") options->driver_path = value;
    else if (flag == "--bind") options->bind_endpoints.push_back(value);
    else if (flag == "--control-fd") options->control_fd = std::stoi(value);
    else if (flag == "--log-level") options->log_level = value;
    else if (flag == "--heartbeat-timeout-ms") options->heartbeat_timeout_ms = std::atoi(value.c_str());
    else if (flag == "--mps-client" && (value == "0" || value == "1")) options->mps_client = value == "1";
    else if (flag == "--curve-secret-file") options->curve_secret_file = value;
    else if (flag == "--swap-space") options->swap_space = value;
    else if (flag == "--nvml") options->nvml_path = value;
    else if (flag == "--swap-space-bytes") options->swap_space_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--host-gpus" && curelay::ParseGpuList(value)) options->host_gpus = *curelay::ParseGpuList(value);
    else return false;
  }
  return (argc % 2) == 1 && !options->driver_path.empty() && !options->bind_endpoints.empty() &&
         options->control_fd >= 0;
}

// A crash of the executor ends only its session, but the backend log should say where it happened: the stack
// goes to stderr (the backend's log), using only async-signal-safe calls, then the signal is re-raised.
void ReportCrash(int signal_number) {
  void* frames[64];
  const int count = backtrace(frames, 64);
  const char header[] = "curelay-executor: fatal signal; stack:\n";
  (void)!write(STDERR_FILENO, header, sizeof(header) - 1);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

void InstallCrashReport() {
  void* warm_up[1];
  backtrace(warm_up, 1);  // loads libgcc's unwinder now, not inside the handler
  for (int signal_number : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(signal_number, ReportCrash);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace curelay;
  Options options;
  if (!ParseOptions(argc, argv, &options)) {
    std::fprintf(stderr,
                 "usage: curelay-executor --driver PATH --bind ENDPOINT [--bind ENDPOINT] --control-fd FD [--nvml PATH] "
                 "[--log-level LEVEL] [--host-gpus I,J,...] [--mps-client 0|1] [--curve-secret-file PATH] "
                 "[--swap-space PATH --swap-space-bytes N]\n"
                 "(started by curelay-backend)\n");
    return 2;
  }
  ConfigureLogging("curelay-executor", options.log_level);
  InstallCrashReport();
  backend::ControlLine control(options.control_fd);

  executor::Driver driver;
  std::string error;
  if (!driver.Load(options.driver_path, &error)) {
    spdlog::error("cannot load the CUDA driver: {}", error);
    control.SendFailed(CUDA_ERROR_NO_DEVICE, error);
    return 1;
  }
  // cuInit before READY: this is the slow part of a session start, and what a warm executor saves a client.
  if (const CUresult result = driver.cuInit(0); result != CUDA_SUCCESS) {
    spdlog::error("cuInit failed with {}", static_cast<int>(result));
    control.SendFailed(result, "cuInit failed");
    return 1;
  }
  int devices = 0;
  if (const CUresult result = driver.cuDeviceGetCount(&devices); result != CUDA_SUCCESS) {
    control.SendFailed(result, "cuDeviceGetCount failed");
    return 1;
  }
  if (!options.host_gpus.empty() && options.host_gpus.size() != static_cast<size_t>(devices)) {
    // The driver dropped some of the GPUs it was told to show (one that does not exist, and all after it).
    const std::string reason = "the driver shows " + std::to_string(devices) + " of the GPUs " +
                               FormatGpuList(options.host_gpus) + " this executor was started for";
    spdlog::error("{}", reason);
    control.SendFailed(CUDA_ERROR_NO_DEVICE, reason);
    return 1;
  }
  if (options.mps_client) {
    const auto setting = [](const char* name) {
      const char* value = std::getenv(name);
      return std::string(value != nullptr ? value : "unset");
    };
    spdlog::info("MPS client: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={} CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={}",
                 setting("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), setting("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
    // The driver runs a process without MPS when it cannot reach the MPS control daemon: spatial sharing that
    // silently became time-slicing would break the tenant's SM limit, so it is refused instead.
    for (int device = 0; device < devices; ++device) {
      int enabled = 0;
      const CUresult result = driver.cuDeviceGetAttribute(&enabled, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, device);
      if (result == CUDA_SUCCESS && enabled == 1) continue;
      const std::string reason =
          "spatial sharing needs this executor to be a client of the backend's MPS server, but its driver reports "
          "MPS " + std::string(result == CUDA_SUCCESS ? "disabled" : "unknown (error " + std::to_string(result) + ")") +
          " on device " + std::to_string(device);
      spdlog::error("{}", reason);
      control.SendFailed(CUDA_ERROR_NOT_SUPPORTED, reason);
      return 1;
    }
  }
  transport::ChannelOptions channel_options;
  // The largest legitimate message is a module image; anything bigger is refused by the transport itself.
  channel_options.max_message_bytes = static_cast<int>(wire::kMaxPayloadBytes + wire::kMaxHeaderBytes);
  channel_options.heartbeat_timeout_ms = options.heartbeat_timeout_ms;
  if (!options.curve_secret_file.empty()) {
    // The backend's key pair, so clients that trust the backend's public key trust its executors; the ZAP gate
    // (bound before the socket) then lets in only the client key the session is assigned.
    std::ifstream file(options.curve_secret_file);
    std::string secret;
    std::getline(file, secret);
    channel_options.curve.server_secret = secret;
    channel_options.curve.server_public = transport::CurvePublicKeyOf(secret);
    if (channel_options.curve.server_public.empty() ||
        !transport::CurveClientGate::Start([](const std::string& line) { spdlog::warn("{}", line); }, &error)) {
      const std::string reason = "CURVE: " + (error.empty() ? options.curve_secret_file + " holds no secret key" : error);
      spdlog::error("{}", reason);
      control.SendFailed(CUDA_ERROR_OPERATING_SYSTEM, reason);
      return 1;
    }
  }
  std::shared_ptr<transport::Channel> channel = transport::BindChannel(options.bind_endpoints, channel_options, &error);
  if (channel == nullptr) {
    spdlog::error("cannot bind the session endpoint: {}", error);
    control.SendFailed(CUDA_ERROR_OPERATING_SYSTEM, error);
    return 1;
  }
  // The backend tells each client the endpoint of the transport it came on; the session runs on whichever one
  // its client attaches over (BindChannel).
  control.SendReady(channel->BoundEndpoint("ipc"), channel->BoundEndpoint("tcp"), channel->BoundEndpoint("rdma"),
                    devices);

  backend::ControlRecord record;
  if (!control.Receive(&record)) {
    spdlog::debug("backend closed the control line before assigning a session; exiting");
    return 0;
  }
  if (record.kind != backend::ControlRecord::Kind::kSession) {
    spdlog::error("expected a session assignment on the control line: {}", record.reason);
    return 1;
  }
  backend::SessionAssignment& assignment = record.session;
  spdlog::info("serving session {}", assignment.session_id);
  if (!options.curve_secret_file.empty()) transport::CurveClientGate::Allow(assignment.client_curve_key);
  executor::Session session(driver, std::move(channel), std::move(assignment.key));
  if (!session.memory_quota().Attach(assignment.quota_board, assignment.quota_session_slot, &error)) {
    spdlog::error("session {}: cannot open the memory quota board: {}", assignment.session_id, error);
    return 1;
  }
  if (!session.dispatch_gate().Attach(assignment.dispatch_board, assignment.quota_session_slot, options.host_gpus,
                                     &error)) {
    spdlog::error("session {}: cannot open the dispatch board: {}", assignment.session_id, error);
    return 1;
  }
  session.ipc_registry().Configure(assignment.ipc_registry, assignment.ipc_scope);
  session.host_nvml().Configure(options.nvml_path);
  session.SetClient(assignment.record.client_pid, assignment.record.client_program,
                    assignment.record.mps_sm_percent != 0);
  session.shareable_handles().Configure(assignment.ipc_registry);
  session.SetHostGpus(options.host_gpus);
  // tcp lanes take a port of the range the session's tcp endpoint came from (a fixed port: any free one).
  for (const auto& endpoint : options.bind_endpoints) {
    const auto parsed = transport::Endpoint::Parse(endpoint);
    if (parsed && parsed->kind == transport::Endpoint::Kind::kTcp && transport::ParsePortRange(parsed->port)) {
      channel_options.lane_ports = parsed->port;
    }
  }
  session.SetOfferOptions(channel_options);
  if (!options.swap_space.empty() && options.swap_space_bytes != 0 &&
      !session.swap_space().Open(options.swap_space, options.swap_space_bytes, &error)) {
    // The session runs; it only never swaps (its tenant's swap policy then waits, as `wait` does).
    spdlog::warn("session {}: no swap space: {}", assignment.session_id, error);
  }
  // The backend ends every session sharing this one's MPS server when its context faults (the fault reaches them).
  // The line outlives the backend: a new one adopts the session (executor/backend_link.h).
  executor::BackendLink link(control, assignment, session.dispatch_gate());
  session.OnFatalFault([&link](CUresult result) { link.SendFaulted(result); });
  link.Start();
  const int status = session.Run();
  spdlog::info("session {} ended", assignment.session_id);
  // The teardown (~Session) frees what the client left, and freeing waits for the GPU's work: work the client left
  // stuck (a stream waiting for a value that never comes) would hold this process, and its GPU memory, forever
  // (measured on the H200). Past the deadline the process ends at once, as a native process's exit abandons its
  // work; the kernel driver frees what it held and the backend settles the session as for any executor that died.
  std::thread([session_id = assignment.session_id] {
    std::this_thread::sleep_for(kTeardownDeadline);
    spdlog::warn("session {}: teardown still waiting for the GPU after {} s (work the client left never completes); "
                 "exiting without it",
                 session_id, std::chrono::duration_cast<std::chrono::seconds>(kTeardownDeadline).count());
    spdlog::shutdown();
    _exit(kTeardownTimedOutStatus);
  }).detach();
  return status;
}
