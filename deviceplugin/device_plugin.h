// curelay's Kubernetes device plugin: advertises the backend's GPUs to the kubelet as shares (resource
// curelay.io/gpu), keeps their health from polling the backend's admin endpoint, and on Allocate makes a tenant for
// the container's shares and hands the container its token and the CDI device that puts the shim in it.
// Protocol: the kubelet's device-plugin API v1beta1 (deviceplugin_v1beta1.proto) on unix sockets.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/deviceplugin_v1beta1.grpc.pb.h"
#include "deviceplugin/shares.h"

namespace curelay::deviceplugin {

struct PluginOptions {
  std::string kubelet_dir = "/var/lib/kubelet/device-plugins";  // holds kubelet.sock; the plugin's socket goes here
  std::string socket_name = "curelay.sock";
  std::string resource_name = "curelay.io/gpu";
  std::string admin_endpoint = "ipc:///dev/shm/curelay/private/admin.sock";
  int shares_per_gpu = 4;
  uint64_t memory_quota_per_share = 0;  // 0: the tenants get no memory quota
  std::string cdi_device = "curelay.io/gpu=local";
  std::string tenant_prefix = "k8s-";
  int poll_interval_ms = 5000;
  // Which tenant holds which shares, kept across plugin restarts so that a re-allocated share's old tenant is
  // revoked even when it was not named after that share. Empty: kept in memory only.
  std::string state_file = "/var/lib/curelay-device-plugin/tenants.json";
};

class DevicePlugin {
 public:
  explicit DevicePlugin(PluginOptions options);
  ~DevicePlugin();
  // Serves, registers and re-registers until `stop` becomes true (checked every 200 ms).
  void Run(const std::atomic<bool>& stop);

  // The gRPC handlers' work (the service forwards to these).
  v1beta1::ListAndWatchResponse DeviceList();
  grpc::Status WatchDevices(grpc::ServerContext* context, grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer);
  grpc::Status Allocate(const v1beta1::AllocateRequest& request, v1beta1::AllocateResponse* response);
  grpc::Status PreferredAllocation(const v1beta1::PreferredAllocationRequest& request,
                                   v1beta1::PreferredAllocationResponse* response);

 private:
  void PollBackend();
  void StartServer();
  void StopServer();
  bool Register();
  // Removes every tenant of this plugin that holds one of `shares` (revoking its token); false with `error` when
  // the backend could not do it.
  bool RevokeTenantsOf(const std::set<Share>& shares, std::string* error);
  void LoadState();
  void SaveState();

  const PluginOptions options_;
  const std::string socket_path_;
  const std::string kubelet_socket_path_;

  // Device health, and a version that ListAndWatch streams watch.
  std::mutex mutex_;
  std::condition_variable changed_;
  int advertised_gpus_ = 0;         // every GPU the backend has shown since the plugin started
  std::vector<bool> gpu_healthy_;   // per advertised GPU
  uint64_t version_ = 0;
  bool serving_stopped_ = false;    // the current server is being shut down: its streams end
  bool polling_stopped_ = false;

  std::mutex allocate_mutex_;                                   // one Allocate at a time against the backend
  std::map<std::string, std::vector<std::string>> tenants_;     // tenant name -> its share IDs (the state file)

  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread poller_;
};

}  // namespace curelay::deviceplugin
