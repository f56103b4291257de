// A CDI spec (Container Device Interface) that puts curelay's shim into a container: `podman run --device
// curelay.io/gpu=local` (or `=remote`) mounts the shim as the image's libcuda.so.1 and points it at the backend.
// Pure: options in, the spec as JSON out (CDI runtimes read JSON and YAML alike); backendctl writes it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace curelay::backendctl {

struct CdiOptions {
  std::string shim_path;              // the host's libcuda.so.1 (the shim); must exist
  std::string nvml_path;              // the NVML shim, mounted as libnvidia-ml.so.1 when given
  std::string library_dir = "/usr/lib/x86_64-linux-gnu";  // where the container's dynamic loader looks by default
  bool local = true;                  // device `local`: same-host sessions through the runtime directory
  std::string runtime_dir = "/dev/shm/curelay";
  std::string local_endpoint;         // default ipc://<runtime_dir>/backend.sock
  std::string remote_endpoint;        // device `remote` when given: tcp://HOST:PORT or rdma://HOST:PORT
  std::string server_key;             // the backend's CURVE public key for `remote` (CURELAY_SERVER_KEY); empty: none
};

// The spec, or null with `error` set when the options cannot make a usable one.
nlohmann::json BuildCdiSpec(const CdiOptions& options, std::string* error);

}  // namespace curelay::backendctl
