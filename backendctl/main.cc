// backendctl: the administrator's command line for a curelay backend. It sends one JSON request to the backend's
// admin endpoint (docs/operations.md) and prints the answer as a table, or as JSON with -o json.
// Exit codes: 0 done, 1 the backend refused or could not be reached, 2 usage error.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <ctime>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backendctl/admin_client.h"
#include "backendctl/cdi_spec.h"
#include "backendctl/table.h"
#include "common/gpu_list.h"

namespace {

using curelay::admin::Ask;
using curelay::admin::ParseBytes;
using nlohmann::json;

constexpr const char* kUsage =
    "usage: backendctl [--endpoint ENDPOINT] [-o table|json] COMMAND\n"
    "commands:\n"
    "  tenant add NAME [LIMITS]     create a tenant; prints its token once\n"
    "  tenant set NAME LIMITS       change limits (running sessions follow at once)\n"
    "  tenant remove NAME\n"
    "  tenant list\n"
    "  tenant show NAME\n"
    "  session list\n"
    "  session kill SESSION\n"
    "  stats                        per tenant: GPU time and share, kernels, queue wait, memory and quota, swaps\n"
    "  top [--interval SECONDS]     stats, refreshed until interrupted\n"
    "  cdi generate [CDI OPTIONS]   print a CDI spec (curelay.io/gpu=local, =remote) for podman/containerd; no\n"
    "                               backend needed\n"
    "limits:\n"
    "  --priority high|normal|low   --weight N           --memory-quota BYTES[K|M|G|T] (0: none)\n"
    "  --memory-policy fail|wait|swap  when the GPU is short: fail, wait, or take turns (swap: sessions are swapped\n"
    "                               out and in by the backend; needs its [swap] host_budget_mib)\n"
    "  --wait-timeout MS            how long wait and swap wait (swap: 0 waits for ever)\n"
    "  --switch-time MS             swap: how long a turn holds the GPU's memory (0: the backend's setting)\n"
    "  --max-sessions N (0: unlimited)\n"
    "  --gpus all|I,J,...           the host GPUs (as the backend numbers them) its sessions see, in that order\n"
    "  --mps-sm-percent N           1-100: spatial sharing, its executors are clients of the backend's MPS server\n"
    "                               with N% of each GPU's SMs (0: time-sliced, the default)\n"
    "  --mps-memory-limit BYTES     with MPS: each session's device memory limit, enforced by the driver\n"
    "cdi options:\n"
    "  --shim PATH, --nvml PATH (default: ../lib/ beside backendctl when installed there, else\n"
    "                               /opt/curelay/lib/libcuda.so.1 and no NVML shim; --nvml '' leaves it out)\n"
    "  --runtime-dir DIR (default /dev/shm/curelay)          --local-endpoint ipc://PATH (default DIR/backend.sock)\n"
    "  --remote tcp://HOST:PORT|rdma://HOST:PORT (adds =remote)  --no-local (only =remote)\n"
    "  --server-key KEY (=remote's CURELAY_SERVER_KEY: the backend's CURVE public key, <state-dir>/curve/server.public)\n"
    "  --lib-dir DIR (in the container; default /usr/lib/x86_64-linux-gnu)  --output FILE (default stdout)\n"
    "endpoint: --endpoint, else $CURELAY_ADMIN_ENDPOINT, else ipc:///dev/shm/curelay/private/admin.sock;\n"
    "a tcp:// endpoint needs the admin token in $CURELAY_ADMIN_TOKEN, and the backend's CURVE public key in\n"
    "$CURELAY_SERVER_KEY when the backend runs with --curve.\n";

int UsageError(const std::string& message) {
  if (!message.empty()) std::fprintf(stderr, "backendctl: %s\n", message.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

bool ParseCount(const std::string& text, uint64_t* value) {
  char* end = nullptr;
  *value = std::strtoull(text.c_str(), &end, 10);
  return end != text.c_str() && *end == '\0';
}

// Limit flags into tenant fields; false with `error` on a bad flag or value.
bool ParseLimits(const std::vector<std::string>& args, size_t first, json* fields, std::string* error) {
  for (size_t i = first; i < args.size(); i += 2) {
    const std::string& flag = args[i];
    if (i + 1 >= args.size()) {
      *error = flag + " needs a value";
      return false;
    }
    const std::string& value = args[i + 1];
    uint64_t number = 0;
    if (flag == "--priority") (*fields)["priority"] = value;
    else if (flag == "--memory-policy") (*fields)["memory_policy"] = value;
    else if (flag == "--memory-quota" && ParseBytes(value, &number)) (*fields)["memory_quota_bytes"] = number;
    else if (flag == "--weight" && ParseCount(value, &number)) (*fields)["weight"] = number;
    else if (flag == "--wait-timeout" && ParseCount(value, &number)) (*fields)["wait_timeout_ms"] = number;
    else if (flag == "--switch-time" && ParseCount(value, &number)) (*fields)["switch_time_ms"] = number;
    else if (flag == "--max-sessions" && ParseCount(value, &number)) (*fields)["max_sessions"] = number;
    else if (flag == "--gpus" && curelay::ParseGpuList(value)) (*fields)["gpus"] = *curelay::ParseGpuList(value);
    else if (flag == "--mps-sm-percent" && ParseCount(value, &number)) (*fields)["mps_sm_percent"] = number;
    else if (flag == "--mps-memory-limit" && ParseBytes(value, &number)) (*fields)["mps_memory_limit_bytes"] = number;
    else {
      *error = "bad limit " + flag + " " + value;
      return false;
    }
  }
  return true;
}

std::string Bytes(uint64_t bytes) {
  if (bytes == 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

void PrintTenants(const json& tenants) {
  curelay::backendctl::Table table(
      {"NAME", "PRIORITY", "WEIGHT", "MEMORY QUOTA", "POLICY", "WAIT MS", "SWITCH MS", "MAX SESSIONS", "GPUS",
       "SPATIAL (MPS)"});
  for (const json& t : tenants) {
    const uint64_t max_sessions = t["max_sessions"];
    const uint64_t sm_percent = t.value("mps_sm_percent", uint64_t{0});
    const uint64_t memory_limit = t.value("mps_memory_limit_bytes", uint64_t{0});
    const std::string spatial = sm_percent == 0 ? "-"
                                : std::to_string(sm_percent) + "% SMs" +
                                      (memory_limit == 0 ? "" : ", " + Bytes(memory_limit));
    table.Add({t["name"], t["priority"], std::to_string(t["weight"].get<uint64_t>()),
               Bytes(t["memory_quota_bytes"]), t["memory_policy"], std::to_string(t["wait_timeout_ms"].get<uint64_t>()),
               t.value("switch_time_ms", uint64_t{0}) == 0 ? "-" : std::to_string(t["switch_time_ms"].get<uint64_t>()),
               max_sessions == 0 ? "-" : std::to_string(max_sessions),
               curelay::FormatGpuList(t["gpus"].get<std::vector<int>>()), spatial});
  }
  table.Print(std::cout);
}

void PrintSessions(const json& sessions) {
  curelay::backendctl::Table table({"SESSION", "TENANT", "PROGRAM", "CLIENT PID", "CLIENT HOST", "EXECUTOR PID",
                                    "MEMORY", "SWAPS OUT/IN", "SWAP S"});
  for (const json& s : sessions) {
    const std::string tenant = s["tenant"];
    char swap_seconds[32];
    std::snprintf(swap_seconds, sizeof swap_seconds, "%.3f", s.value("swap_seconds", 0.0));
    // A session that is never swapped out (the reason is in -o json's "unswappable") stays where it is: "(fixed)".
    const std::string memory =
        s.value("residency", std::string("-")) + (s.contains("unswappable") ? std::string(" (fixed)") : std::string());
    table.Add({std::to_string(s["session"].get<uint64_t>()), tenant.empty() ? "(anonymous)" : tenant,
               s["client_program"], std::to_string(s["client_pid"].get<uint64_t>()), s["client_host"],
               std::to_string(s["executor_pid"].get<int64_t>()), memory,
               std::to_string(s.value("swap_outs", uint64_t{0})) + "/" + std::to_string(s.value("swap_ins", uint64_t{0})),
               swap_seconds});
  }
  table.Print(std::cout);
}

void PrintStats(const json& result) {
  curelay::backendctl::Table table({"TENANT", "PRIORITY", "WEIGHT", "SESSIONS", "GPU S", "ACTIVE S", "SHARE", "KERNELS",
                                    "WAIT P50 MS", "WAIT P99 MS", "MEMORY USED", "PEAK", "QUOTA", "SWAPPED",
                                    "SWAPS OUT/IN", "SWAP S"});
  const auto number = [](const json& row, const char* key, const char* format) {
    char text[32];
    std::snprintf(text, sizeof text, format, row.value(key, 0.0));
    return std::string(text);
  };
  for (const json& s : result["tenants"]) {
    table.Add({s["tenant"], s["priority"], std::to_string(s["weight"].get<uint64_t>()),
               std::to_string(s["sessions"].get<uint64_t>()), number(s, "gpu_seconds", "%.3f"),
               number(s, "active_seconds", "%.3f"), number(s, "gpu_share", "%.3f"), std::to_string(s.value("kernels", uint64_t{0})),
               number(s, "queue_wait_p50_ms", "%.3f"), number(s, "queue_wait_p99_ms", "%.3f"),
               Bytes(s["memory_used_bytes"]), Bytes(s["memory_peak_bytes"]), Bytes(s["memory_quota_bytes"]),
               std::to_string(s.value("swapped_sessions", uint64_t{0})),
               std::to_string(s.value("swap_outs", uint64_t{0})) + "/" + std::to_string(s.value("swap_ins", uint64_t{0})),
               number(s, "swap_seconds", "%.3f")});
  }
  table.Print(std::cout);
  // Per GPU: sessions that can use it, and scheduled tenants' work on it (anonymous sessions are not scheduled).
  curelay::backendctl::Table gpus({"GPU", "SESSIONS", "UTILIZATION", "BUSY S", "SATURATED S", "SATURATIONS"});
  for (const json& g : result.value("gpus", json::array())) {
    gpus.Add({std::to_string(g["gpu"].get<int>()), std::to_string(g["sessions"].get<uint64_t>()),
              number(g, "utilization", "%.2f"), number(g, "busy_seconds", "%.3f"),
              number(g, "saturated_seconds", "%.3f"), std::to_string(g.value("saturations", uint64_t{0}))});
  }
  std::cout << "\n";
  gpus.Print(std::cout);
}

// `cdi generate`: builds the spec locally (the shim's host path must exist), prints or writes it.
// An installed backendctl (cmake --install) has the shims in ../lib beside its bin/: the defaults, when present.
std::string InstalledLibrary(const char* name) {
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  if (length <= 0) return {};
  std::string path(self, static_cast<size_t>(length));
  path = path.substr(0, path.rfind('/'));
  path = path.substr(0, path.rfind('/')) + "/lib/" + name;
  return access(path.c_str(), R_OK) == 0 ? path : std::string();
}

int GenerateCdiSpec(const std::vector<std::string>& args) {
  curelay::backendctl::CdiOptions options;
  options.shim_path = InstalledLibrary("libcuda.so.1");
  if (options.shim_path.empty()) options.shim_path = "/opt/curelay/lib/libcuda.so.1";
  options.nvml_path = InstalledLibrary("libnvidia-ml.so.1");
  std::string output;
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--no-local") {
      options.local = false;
      continue;
    }
    if (i + 1 >= args.size()) return UsageError(flag + " needs a value");
    const std::string& value = args[++i];
    if (flag == "--shim") options.shim_path = value;
    else if (flag == "--nvml") options.nvml_path = value;
    else if (flag == "--runtime-dir") options.runtime_dir = value;
    else if (flag == "--local-endpoint") options.local_endpoint = value;
    else if (flag == "--remote") options.remote_endpoint = value;
    else if (flag == "--server-key") options.server_key = value;
    else if (flag == "--lib-dir") options.library_dir = value;
    else if (flag == "--output") output = value;
    else return UsageError("unknown cdi option " + flag);
  }
  std::string error;
  const json spec = curelay::backendctl::BuildCdiSpec(options, &error);
  if (spec.is_null()) {
    std::fprintf(stderr, "backendctl: %s\n", error.c_str());
    return 2;
  }
  if (output.empty()) {
    std::cout << spec.dump(2) << "\n";
    return 0;
  }
  std::ofstream file(output);
  file << spec.dump(2) << "\n";
  if (!file.flush()) {
    std::fprintf(stderr, "backendctl: cannot write %s\n", output.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* env_endpoint = std::getenv("CURELAY_ADMIN_ENDPOINT");
  std::string endpoint = env_endpoint ? env_endpoint : "ipc:///dev/shm/curelay/private/admin.sock";
  bool as_json = false;
  while (!args.empty() && args[0].rfind("-", 0) == 0) {
    if (args[0] == "-h" || args[0] == "--help") return std::fputs(kUsage, stdout), 0;
    if (args.size() < 2) return UsageError(args[0] + " needs a value");
    if (args[0] == "--endpoint") endpoint = args[1];
    else if (args[0] == "-o" && (args[1] == "json" || args[1] == "table")) as_json = args[1] == "json";
    else return UsageError("unknown option " + args[0] + " " + args[1]);
    args.erase(args.begin(), args.begin() + 2);
  }
  if (args.empty()) return UsageError("");
  const std::string noun = args[0];
  const std::string verb = args.size() > 1 ? args[1] : "";
  if (noun == "cdi" && verb == "generate") return GenerateCdiSpec(args);
  json request;
  std::string error;
  if (noun == "tenant" && (verb == "add" || verb == "set") && args.size() >= 3) {
    json fields = {{"name", args[2]}};
    if (!ParseLimits(args, 3, &fields, &error)) return UsageError(error);
    request = {{"command", "tenant." + verb}, {"args", fields}};
  } else if (noun == "tenant" && (verb == "remove" || verb == "show") && args.size() == 3) {
    request = {{"command", "tenant." + verb}, {"args", {{"name", args[2]}}}};
  } else if (noun == "tenant" && verb == "list" && args.size() == 2) {
    request = {{"command", "tenant.list"}};
  } else if (noun == "session" && verb == "list" && args.size() == 2) {
    request = {{"command", "session.list"}};
  } else if (noun == "session" && verb == "kill" && args.size() == 3) {
    uint64_t session = 0;
    if (!ParseCount(args[2], &session)) return UsageError("a session is a number");
    request = {{"command", "session.kill"}, {"args", {{"session", session}}}};
  } else if (noun == "stats" && args.size() == 1) {
    request = {{"command", "stats"}};
  } else if (noun == "top" && (args.size() == 1 || (args.size() == 3 && args[1] == "--interval"))) {
    const double interval = args.size() == 3 ? std::atof(args[2].c_str()) : 2.0;
    if (interval <= 0) return UsageError("--interval is a positive number of seconds");
    for (;;) {
      const json reply = Ask(endpoint, {{"command", "stats"}});
      if (!reply.value("ok", false)) {
        std::fprintf(stderr, "backendctl: %s\n", reply.value("error", std::string("failed")).c_str());
        return 1;
      }
      const std::time_t now = std::time(nullptr);
      std::cout << "\033[H\033[2J" << "curelay backend " << endpoint << "  " << std::ctime(&now) << "\n";
      PrintStats(reply["result"]);
      std::cout.flush();
      usleep(static_cast<useconds_t>(interval * 1e6));
    }
  } else {
    return UsageError("unknown or incomplete command");
  }

  const json reply = Ask(endpoint, request);
  if (!reply.value("ok", false)) {
    std::fprintf(stderr, "backendctl: %s\n", reply.value("error", std::string("failed")).c_str());
    return 1;
  }
  const json& result = reply["result"];
  if (as_json) {
    std::cout << result.dump(2) << "\n";
    return 0;
  }
  if (request["command"] == "tenant.add") {
    PrintTenants(json::array({result["tenant"]}));
    std::cout << "\ntoken (shown once; give it to the tenant as CURELAY_TOKEN):\n" << result["token"].get<std::string>()
              << "\n";
  } else if (request["command"] == "tenant.set" || request["command"] == "tenant.show") {
    PrintTenants(json::array({result["tenant"]}));
  } else if (request["command"] == "tenant.list") {
    PrintTenants(result["tenants"]);
  } else if (request["command"] == "session.list") {
    PrintSessions(result["sessions"]);
  } else if (request["command"] == "stats") {
    PrintStats(result);
  }
  return 0;
}
