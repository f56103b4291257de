// curelay-backend: the GPU-host service. Listens for shim clients, admits them and gives each session an
// executor process of its own (see docs/architecture.md).
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/broker.h"
#include "common/logging.h"

namespace {

std::atomic<bool> stop_requested{false};

void RequestStop(int) { stop_requested.store(true); }

std::string SiblingExecutable(const char* name) {
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path = n > 0 ? std::string(self, n) : std::string();
  return path.substr(0, path.rfind('/') + 1) + name;
}

int Usage() {
  std::fprintf(stderr,
               "usage: curelay-backend [--listen ENDPOINT]... [--driver PATH] [--executor PATH]\n"
               "                       [--runtime-dir DIR] [--warm-pool N] [--log-level LEVEL]\n"
               "  --listen      ipc://PATH or tcp://HOST:PORT (repeatable; default ipc:///dev/shm/curelay/backend.sock)\n"
               "  --driver      the real libcuda.so.1 (default $CURELAY_REAL_DRIVER or libcuda.so.1 on the\n"
               "                loader path; the curelay shim itself is refused)\n"
               "  --executor    the curelay-executor binary (default: next to this one)\n"
               "  --runtime-dir where session sockets live (default /dev/shm/curelay; must be tmpfs for pinned host memory)\n"
               "  --warm-pool   executors started ahead of demand (default 1)\n"
               "  --log-level   trace|debug|info|warn|error (default info, or $CURELAY_LOG_LEVEL)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace curelay::backend;
  BrokerSettings settings;
  const char* env_driver = std::getenv("CURELAY_REAL_DRIVER");
  settings.executors.driver_path = env_driver ? env_driver : "libcuda.so.1";
  settings.executors.executor_path = SiblingExecutable("curelay-executor");
  settings.executors.runtime_dir = "/dev/shm/curelay";
  const char* env_level = std::getenv("CURELAY_LOG_LEVEL");
  std::string log_level = env_level ? env_level : "info";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return Usage(), 0;
    if (i + 1 >= argc) return Usage();
    const std::string value = argv[++i];
    if (flag == "--listen") settings.listen_endpoints.push_back(value);
    else if (flag == "--driver") settings.executors.driver_path = value;
    else if (flag == "--executor") settings.executors.executor_path = value;
    else if (flag == "--runtime-dir") settings.executors.runtime_dir = value;
    else if (flag == "--warm-pool") settings.executors.warm_pool = std::stoul(value);
    else if (flag == "--log-level") log_level = value;
    else return Usage();
  }
  if (!curelay::ConfigureLogging("curelay-backend", log_level)) {
    std::fprintf(stderr, "unknown log level '%s'\n", log_level.c_str());
    return 2;
  }
  if (settings.listen_endpoints.empty()) settings.listen_endpoints.push_back("ipc:///dev/shm/curelay/backend.sock");
  settings.executors.ipc = false;
  for (const auto& endpoint : settings.listen_endpoints) {
    if (endpoint.rfind("ipc://", 0) == 0) {
      settings.executors.ipc = true;
      const std::string path = endpoint.substr(6);
      const std::string dir = path.substr(0, path.rfind('/'));
      if (!dir.empty()) mkdir(dir.c_str(), 0755);
    } else if (endpoint.rfind("tcp://", 0) == 0) {
      const std::string rest = endpoint.substr(6);
      settings.executors.tcp_hosts.push_back(rest.substr(0, rest.rfind(':')));
    } else {
      spdlog::critical("unsupported endpoint '{}': use ipc:// or tcp://", endpoint);
      return 2;
    }
  }
  mkdir(settings.executors.runtime_dir.c_str(), 0755);
  // Same-host clients' pinned host memory is a file here that the executor registers with the driver, and the
  // driver pins only memory-backed pages (measured: a file on a disk filesystem is refused).
  constexpr long kTmpfsMagic = 0x01021994;
  struct statfs runtime_fs {};
  if (statfs(settings.executors.runtime_dir.c_str(), &runtime_fs) == 0 && runtime_fs.f_type != kTmpfsMagic) {
    spdlog::warn("runtime directory {} is not on tmpfs: pinned and mapped host memory of same-host clients will "
                 "fail to register (put it under /dev/shm)", settings.executors.runtime_dir);
  }
  settings.executors.log_level = log_level;

  struct sigaction action {};
  action.sa_handler = RequestStop;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  spdlog::info("driver {}, executor {}", settings.executors.driver_path, settings.executors.executor_path);
  Broker broker(std::move(settings));
  return broker.Run(stop_requested) ? 0 : 1;
}
