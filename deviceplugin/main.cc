// curelay-device-plugin: the Kubernetes device plugin for a curelay backend on the same node (docs/operations.md,
// "Kubernetes"). Runs until SIGTERM or SIGINT.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backendctl/admin_client.h"
#include "common/gpu_list.h"
#include "common/logging.h"
#include "deviceplugin/device_plugin.h"

namespace {

using curelay::admin::ParseBytes;
using curelay::deviceplugin::ShareId;

std::atomic<bool> stop_requested{false};

void RequestStop(int) { stop_requested = true; }

constexpr const char* kUsage =
    "usage: curelay-device-plugin [OPTIONS]\n"
    "  --kubelet-dir DIR          the kubelet's device-plugin directory (default /var/lib/kubelet/device-plugins)\n"
    "  --socket NAME              the plugin's socket in that directory (default curelay.sock)\n"
    "  --resource NAME            the extended resource (default curelay.io/gpu)\n"
    "  --shares-per-gpu N         devices advertised per GPU, 1-1000 (default 4)\n"
    "  --memory-per-share BYTES   each share's memory quota, K/M/G/T suffixes (default 0: no quota)\n"
    "  --cdi-device NAME          the CDI device each container gets (default curelay.io/gpu=local; on nodes whose\n"
    "                             pods reach the backend over the network, curelay.io/gpu=remote)\n"
    "  --admin-endpoint ENDPOINT  the backend's admin endpoint (default $CURELAY_ADMIN_ENDPOINT, else\n"
    "                             ipc:///dev/shm/curelay/private/admin.sock; tcp:// needs $CURELAY_ADMIN_TOKEN)\n"
    "  --tenant-prefix PREFIX     names of the tenants the plugin makes (default k8s-); one per node when several\n"
    "                             nodes' plugins share a backend (e.g. k8s-$(NODE_NAME)-)\n"
    "  --poll-interval-ms MS      how often the backend's health is asked (default 5000)\n"
    "  --state-file PATH          which tenant holds which shares (default\n"
    "                             /var/lib/curelay-device-plugin/tenants.json; '' keeps it in memory only)\n"
    "  --log-level LEVEL          trace, debug, info (default), warn, error\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "curelay-device-plugin: %s\n%s", message.c_str(), kUsage);
  return 2;
}

bool ParseInt(const std::string& text, int low, int high, int* value) {
  char* end = nullptr;
  const long number = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || number < low || number > high) return false;
  *value = static_cast<int>(number);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  curelay::deviceplugin::PluginOptions options;
  if (const char* endpoint = std::getenv("CURELAY_ADMIN_ENDPOINT")) options.admin_endpoint = endpoint;
  std::string log_level = "info";
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "-h" || flag == "--help") return std::fputs(kUsage, stdout), 0;
    if (i + 1 >= args.size()) return UsageError(flag + " needs a value");
    const std::string& value = args[++i];
    if (flag == "--kubelet-dir") options.kubelet_dir = value;
    else if (flag == "--socket" && !value.empty() && value.find('/') == std::string::npos) options.socket_name = value;
    else if (flag == "--resource" && value.find('/') != std::string::npos) options.resource_name = value;
    else if (flag == "--shares-per-gpu" && ParseInt(value, 1, 1000, &options.shares_per_gpu)) continue;
    else if (flag == "--memory-per-share" && ParseBytes(value, &options.memory_quota_per_share)) continue;
    else if (flag == "--cdi-device" && value.find('=') != std::string::npos) options.cdi_device = value;
    else if (flag == "--admin-endpoint") options.admin_endpoint = value;
    else if (flag == "--tenant-prefix") options.tenant_prefix = value;
    else if (flag == "--poll-interval-ms" && ParseInt(value, 50, 3'600'000, &options.poll_interval_ms)) continue;
    else if (flag == "--state-file") options.state_file = value;
    else if (flag == "--log-level") log_level = value;
    else return UsageError("bad option " + flag + " " + value);
  }
  // Tenant names have 1 to 64 letters, digits, '-', '_' and '.': the longest share's name must be one.
  const std::string longest =
      options.tenant_prefix + ShareId({curelay::kMaxHostGpus - 1, options.shares_per_gpu - 1});
  const bool prefix_usable = std::all_of(options.tenant_prefix.begin(), options.tenant_prefix.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (!prefix_usable || longest.size() > 64) {
    return UsageError("--tenant-prefix: tenant names such as " + longest +
                      " must have at most 64 letters, digits, '-', '_' and '.'");
  }
  if (!curelay::ConfigureLogging("curelay-device-plugin", log_level)) return UsageError("bad --log-level");
  struct sigaction action {};
  action.sa_handler = RequestStop;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  curelay::deviceplugin::DevicePlugin plugin(options);
  plugin.Run(stop_requested);
  return 0;
}
