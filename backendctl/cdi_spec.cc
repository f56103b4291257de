#include "backendctl/cdi_spec.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>

#include "transport/endpoint.h"
#include "transport/zmq/zmq_curve.h"

namespace curelay::backendctl {
namespace {

using nlohmann::json;

json ReadOnlyBind(const std::string& host_path, const std::string& container_path) {
  return {{"hostPath", host_path}, {"containerPath", container_path}, {"options", {"ro", "nosuid", "nodev", "bind"}}};
}

// CDI wants absolute host paths; a link is resolved so the container gets the file, not a dangling name.
std::string AbsoluteFile(const std::string& path) {
  char resolved[PATH_MAX];
  struct stat info {};
  if (realpath(path.c_str(), resolved) == nullptr || stat(resolved, &info) != 0 || !S_ISREG(info.st_mode)) return {};
  return resolved;
}

// What every device mounts: the shim where the image's dynamic loader finds libcuda.so.1 without LD_LIBRARY_PATH
// (the image's own setting is left alone), under both names applications open, and the NVML shim beside it.
json LibraryMounts(const CdiOptions& options) {
  json mounts = json::array();
  mounts.push_back(ReadOnlyBind(options.shim_path, options.library_dir + "/libcuda.so.1"));
  mounts.push_back(ReadOnlyBind(options.shim_path, options.library_dir + "/libcuda.so"));
  if (!options.nvml_path.empty()) {
    mounts.push_back(ReadOnlyBind(options.nvml_path, options.library_dir + "/libnvidia-ml.so.1"));
    mounts.push_back(ReadOnlyBind(options.nvml_path, options.library_dir + "/libnvidia-ml.so"));
  }
  return mounts;
}

}  // namespace

json BuildCdiSpec(const CdiOptions& given, std::string* error) {
  CdiOptions options = given;
  options.shim_path = AbsoluteFile(given.shim_path);
  if (options.shim_path.empty()) {
    *error = "the shim " + given.shim_path + " is not a file (--shim PATH names the host's curelay libcuda.so.1)";
    return nullptr;
  }
  if (!given.nvml_path.empty() && (options.nvml_path = AbsoluteFile(given.nvml_path)).empty()) {
    *error = "the NVML shim " + given.nvml_path + " is not a file";
    return nullptr;
  }
  if (options.library_dir.empty() || options.library_dir[0] != '/') {
    *error = "--lib-dir must be an absolute path in the container";
    return nullptr;
  }
  if (options.local && (options.runtime_dir.empty() || options.runtime_dir[0] != '/')) {
    *error = "--runtime-dir must be an absolute path";
    return nullptr;
  }
  if (!options.local && options.remote_endpoint.empty()) {
    *error = "no device: give --remote ENDPOINT, or leave the local device on";
    return nullptr;
  }
  bool needs_mount_types = false;
  json devices = json::array();
  if (options.local) {
    const std::string endpoint =
        options.local_endpoint.empty() ? "ipc://" + options.runtime_dir + "/backend.sock" : options.local_endpoint;
    const auto parsed = transport::Endpoint::Parse(endpoint);
    if (!parsed || !parsed->same_host()) {
      *error = "the local device's endpoint " + endpoint + " is not an ipc:// path";
      return nullptr;
    }
    json mounts = LibraryMounts(options);
    // Same-host sessions create their shared-memory files and reach their executors' sockets here (read-write).
    mounts.push_back({{"hostPath", options.runtime_dir},
                      {"containerPath", options.runtime_dir},
                      {"options", {"rw", "nosuid", "nodev", "bind"}}});
    // The admin socket and the scheduler's boards live in private/, owner-only on the host; a container's root
    // passes that check, so the container sees an empty read-only tmpfs there instead.
    mounts.push_back({{"hostPath", "tmpfs"},
                      {"containerPath", options.runtime_dir + "/private"},
                      {"type", "tmpfs"},
                      {"options", {"ro", "nosuid", "nodev", "noexec", "size=4k", "mode=000"}}});
    needs_mount_types = true;
    devices.push_back({{"name", "local"},
                       {"containerEdits", {{"env", {"CURELAY_ENDPOINT=" + endpoint}}, {"mounts", mounts}}}});
  }
  if (!options.remote_endpoint.empty()) {
    const auto parsed = transport::Endpoint::Parse(options.remote_endpoint);
    if (!parsed || parsed->same_host()) {
      *error = "--remote " + options.remote_endpoint + " is not a tcp:// or rdma:// endpoint";
      return nullptr;
    }
    nlohmann::json env = {"CURELAY_ENDPOINT=" + options.remote_endpoint};
    // The server's public key is no secret (docs/security.md): it may go in the spec, unlike tokens.
    if (!options.server_key.empty()) {
      if (!transport::IsCurveKey(options.server_key)) {
        *error = "--server-key is not a CURVE public key (40 characters of Z85)";
        return nullptr;
      }
      env.push_back("CURELAY_SERVER_KEY=" + options.server_key);
    }
    devices.push_back({{"name", "remote"},
                       {"containerEdits", {{"env", env}, {"mounts", LibraryMounts(options)}}}});
  }
  // The lowest version that carries what the spec uses (Debian 12's podman 4.3 refuses anything above 0.5.0):
  // 0.3.0 has env and bind mounts, 0.4.0 adds a mount's type.
  return {{"cdiVersion", needs_mount_types ? "0.4.0" : "0.3.0"}, {"kind", "curelay.io/gpu"}, {"devices", devices}};
}

}  // namespace curelay::backendctl
