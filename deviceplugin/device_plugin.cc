#include "deviceplugin/device_plugin.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backendctl/admin_client.h"
#include "common/gpu_list.h"

namespace curelay::deviceplugin {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kApiVersion = "v1beta1";
constexpr const char* kHealthy = "Healthy";
constexpr const char* kUnhealthy = "Unhealthy";

// The gRPC service: each handler forwards to the plugin. A new one per server (the kubelet's restart makes a new
// server on a new socket).
class Service final : public v1beta1::DevicePlugin::Service {
 public:
  explicit Service(DevicePlugin* plugin) : plugin_(plugin) {}
  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* options) override {
    options->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    return plugin_->WatchDevices(context, writer);
  }
  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override {
    return plugin_->PreferredAllocation(*request, response);
  }
  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override {
    return plugin_->Allocate(*request, response);
  }
  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;  // not asked for (pre_start_required is false): nothing to prepare
  }

 private:
  DevicePlugin* plugin_;
};

ino_t SocketInode(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISSOCK(info.st_mode) ? info.st_ino : 0;
}

}  // namespace

DevicePlugin::DevicePlugin(PluginOptions options)
    : options_(std::move(options)),
      socket_path_(options_.kubelet_dir + "/" + options_.socket_name),
      kubelet_socket_path_(options_.kubelet_dir + "/kubelet.sock") {
  LoadState();
}

DevicePlugin::~DevicePlugin() {
  {
    std::lock_guard lock(mutex_);
    polling_stopped_ = true;
  }
  changed_.notify_all();
  if (poller_.joinable()) poller_.join();
  StopServer();
}

void DevicePlugin::Run(const std::atomic<bool>& stop) {
  poller_ = std::thread([this] { PollBackend(); });
  ino_t registered_with = 0;  // the kubelet socket (by inode) the plugin last registered with
  bool directory_missing = false;
  while (!stop) {
    struct stat directory {};
    if (stat(options_.kubelet_dir.c_str(), &directory) != 0 || !S_ISDIR(directory.st_mode)) {
      if (!directory_missing) spdlog::warn("waiting for the kubelet's directory {}", options_.kubelet_dir);
      directory_missing = true;
      std::this_thread::sleep_for(200ms);
      continue;
    }
    directory_missing = false;
    // A restarted kubelet removes the plugins' sockets and makes a new kubelet.sock: serve again, register again.
    const ino_t own = SocketInode(socket_path_);
    if (!server_ || own == 0) {
      if (server_) spdlog::info("{} disappeared (kubelet restarted?): serving again", socket_path_);
      StopServer();
      StartServer();
      registered_with = 0;
    }
    const ino_t kubelet = SocketInode(kubelet_socket_path_);
    if (server_ && kubelet != 0 && kubelet != registered_with && Register()) registered_with = kubelet;
    std::this_thread::sleep_for(200ms);
  }
  spdlog::info("stopping");
  {
    std::lock_guard lock(mutex_);
    polling_stopped_ = true;
  }
  changed_.notify_all();
  poller_.join();
  StopServer();
}

void DevicePlugin::StartServer() {
  unlink(socket_path_.c_str());
  {
    std::lock_guard lock(mutex_);
    serving_stopped_ = false;
  }
  service_ = std::make_unique<Service>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) {
    spdlog::error("cannot serve on {}", socket_path_);
    service_.reset();
    return;
  }
  spdlog::info("serving the device-plugin API on {}", socket_path_);
}

void DevicePlugin::StopServer() {
  if (!server_) return;
  {
    std::lock_guard lock(mutex_);
    serving_stopped_ = true;  // ends the ListAndWatch streams, which Shutdown waits for
  }
  changed_.notify_all();
  server_->Shutdown(std::chrono::system_clock::now() + 2s);
  server_.reset();
  service_.reset();
  unlink(socket_path_.c_str());
}

bool DevicePlugin::Register() {
  auto channel = grpc::CreateChannel("unix:" + kubelet_socket_path_, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 5s);
  v1beta1::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(options_.socket_name);
  request.set_resource_name(options_.resource_name);
  request.mutable_options()->set_get_preferred_allocation_available(true);
  v1beta1::Empty reply;
  const grpc::Status status = stub->Register(&context, request, &reply);
  if (!status.ok()) {
    spdlog::warn("registration with the kubelet at {} failed: {}", kubelet_socket_path_, status.error_message());
    return false;
  }
  spdlog::info("registered {} with the kubelet at {}", options_.resource_name, kubelet_socket_path_);
  return true;
}

void DevicePlugin::PollBackend() {
  std::string last_problem = "-";  // logged once per change
  for (;;) {
    const json reply = admin::Ask(options_.admin_endpoint, {{"command", "stats"}}, 2000);
    std::set<int> present;
    std::string problem;
    if (!reply.value("ok", false)) {
      problem = reply.value("error", std::string("the backend refused stats"));
    } else {
      const json& result = reply["result"];
      // host_gpus is 0 until the backend's first executor counted them; before that its GPU list is a placeholder.
      if (result.value("host_gpus", 1) == 0) {
        problem = "the backend has not counted its GPUs yet";
      } else {
        for (const json& gpu : result.value("gpus", json::array())) {
          if (gpu.contains("gpu") && gpu["gpu"].is_number_integer()) present.insert(gpu["gpu"].get<int>());
        }
      }
    }
    if (problem != last_problem) {
      if (problem.empty()) spdlog::info("backend at {}: {} GPU(s)", options_.admin_endpoint, present.size());
      else spdlog::warn("devices unhealthy: {}", problem);
      last_problem = problem;
    }
    std::unique_lock lock(mutex_);
    int gpus = advertised_gpus_;
    for (int gpu : present) {
      if (gpu >= 0 && gpu < kMaxHostGpus) gpus = std::max(gpus, gpu + 1);
    }
    std::vector<bool> healthy(static_cast<size_t>(gpus), false);
    for (int gpu : present) {
      if (gpu >= 0 && gpu < gpus) healthy[static_cast<size_t>(gpu)] = true;
    }
    if (gpus != advertised_gpus_ || healthy != gpu_healthy_) {
      for (int gpu = 0; gpu < gpus; ++gpu) {
        const bool was = gpu < advertised_gpus_ && gpu_healthy_[static_cast<size_t>(gpu)];
        if (was != healthy[static_cast<size_t>(gpu)]) {
          spdlog::info("GPU {}'s shares now {}", gpu, healthy[static_cast<size_t>(gpu)] ? kHealthy : kUnhealthy);
        }
      }
      advertised_gpus_ = gpus;
      gpu_healthy_ = healthy;
      ++version_;
      changed_.notify_all();
    }
    if (changed_.wait_for(lock, std::chrono::milliseconds(options_.poll_interval_ms),
                          [&] { return polling_stopped_; })) {
      return;
    }
  }
}

v1beta1::ListAndWatchResponse DevicePlugin::DeviceList() {
  v1beta1::ListAndWatchResponse list;
  for (int gpu = 0; gpu < advertised_gpus_; ++gpu) {
    for (int index = 0; index < options_.shares_per_gpu; ++index) {
      v1beta1::Device* device = list.add_devices();
      device->set_id(ShareId({gpu, index}));
      device->set_health(gpu_healthy_[static_cast<size_t>(gpu)] ? kHealthy : kUnhealthy);
    }
  }
  return list;
}

grpc::Status DevicePlugin::WatchDevices(grpc::ServerContext* context,
                                        grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  uint64_t sent = 0;
  bool first = true;
  std::unique_lock lock(mutex_);
  while (!serving_stopped_ && !context->IsCancelled()) {
    if (first || sent != version_) {
      const v1beta1::ListAndWatchResponse list = DeviceList();
      sent = version_;
      first = false;
      lock.unlock();
      const bool written = writer->Write(list);
      lock.lock();
      if (!written) break;  // the kubelet went away
      continue;
    }
    changed_.wait_for(lock, 500ms);  // and look at the cancellation again
  }
  return grpc::Status::OK;
}

grpc::Status DevicePlugin::PreferredAllocation(const v1beta1::PreferredAllocationRequest& request,
                                               v1beta1::PreferredAllocationResponse* response) {
  int gpus = 0;
  {
    std::lock_guard lock(mutex_);
    gpus = advertised_gpus_;
  }
  for (const auto& container : request.container_requests()) {
    const std::vector<std::string> available(container.available_device_ids().begin(),
                                             container.available_device_ids().end());
    const std::vector<std::string> must_include(container.must_include_device_ids().begin(),
                                                container.must_include_device_ids().end());
    auto* answer = response->add_container_responses();
    for (const std::string& id :
         PreferredShares(available, must_include, container.allocation_size(), gpus, options_.shares_per_gpu)) {
      answer->add_device_ids(id);
    }
  }
  return grpc::Status::OK;
}

grpc::Status DevicePlugin::Allocate(const v1beta1::AllocateRequest& request, v1beta1::AllocateResponse* response) {
  std::lock_guard allocating(allocate_mutex_);
  int gpus = 0;
  {
    std::lock_guard lock(mutex_);
    gpus = advertised_gpus_;
  }
  for (const auto& container : request.container_requests()) {
    std::set<Share> shares;
    for (const std::string& id : container.devices_ids()) {
      const auto share = ParseShareId(id, gpus, options_.shares_per_gpu);
      if (!share) return {grpc::StatusCode::INVALID_ARGUMENT, "not a device of this plugin: " + id};
      shares.insert(*share);
    }
    if (shares.empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "a container request without devices"};
    std::string error;
    if (!RevokeTenantsOf(shares, &error)) return {grpc::StatusCode::UNAVAILABLE, error};
    const ShareTenant tenant = TenantFor(shares, options_.tenant_prefix);
    json fields = {{"name", tenant.name}, {"gpus", tenant.gpus}, {"weight", tenant.weight}};
    if (options_.memory_quota_per_share > 0) {
      fields["memory_quota_bytes"] = options_.memory_quota_per_share * shares.size();
    }
    const json reply = admin::Ask(options_.admin_endpoint, {{"command", "tenant.add"}, {"args", fields}});
    if (!reply.value("ok", false)) {
      const std::string reason = reply.value("error", std::string("refused"));
      spdlog::error("tenant '{}' could not be created: {}", tenant.name, reason);
      return {grpc::StatusCode::UNAVAILABLE, "curelay backend: " + reason};
    }
    const std::string token = reply["result"].value("token", std::string());
    if (token.empty()) return {grpc::StatusCode::INTERNAL, "the backend's answer to tenant.add has no token"};
    std::vector<std::string>& ids = tenants_[tenant.name];
    ids.clear();
    for (const Share& share : shares) ids.push_back(ShareId(share));
    SaveState();
    spdlog::info("tenant '{}' for {} share(s) on GPU(s) {}", tenant.name, shares.size(), json(tenant.gpus).dump());

    auto* answer = response->add_container_responses();
    (*answer->mutable_envs())["CURELAY_TOKEN"] = token;
    answer->add_cdi_devices()->set_name(options_.cdi_device);
  }
  return grpc::Status::OK;
}

bool DevicePlugin::RevokeTenantsOf(const std::set<Share>& shares, std::string* error) {
  std::set<std::string> names;
  for (const Share& share : shares) names.insert(options_.tenant_prefix + ShareId(share));  // known or not
  std::set<std::string> ids;
  for (const Share& share : shares) ids.insert(ShareId(share));
  for (const auto& [name, held] : tenants_) {
    for (const std::string& id : held) {
      if (ids.contains(id)) names.insert(name);
    }
  }
  for (const std::string& name : names) {
    const json reply = admin::Ask(options_.admin_endpoint, {{"command", "tenant.remove"}, {"args", {{"name", name}}}});
    const std::string failure = reply.value("error", std::string());
    if (!reply.value("ok", false) && failure != "no tenant '" + name + "'") {
      *error = "curelay backend: removing tenant '" + name + "': " + failure;
      return false;
    }
    if (reply.value("ok", false)) spdlog::info("tenant '{}' removed (its shares are allocated again)", name);
    tenants_.erase(name);
  }
  SaveState();
  return true;
}

void DevicePlugin::LoadState() {
  if (options_.state_file.empty()) return;
  std::ifstream in(options_.state_file);
  if (!in) return;
  const json state = json::parse(in, nullptr, false);
  if (!state.is_object()) {
    spdlog::warn("{} is not a JSON object: ignored", options_.state_file);
    return;
  }
  for (const auto& [name, ids] : state.items()) {
    if (!ids.is_array()) continue;
    for (const json& id : ids) {
      if (id.is_string()) tenants_[name].push_back(id.get<std::string>());
    }
  }
}

void DevicePlugin::SaveState() {
  if (options_.state_file.empty()) return;
  const std::string temporary = options_.state_file + ".tmp";
  std::ofstream out(temporary, std::ios::trunc);
  out << json(tenants_).dump() << "\n";
  if (!out.flush() || std::rename(temporary.c_str(), options_.state_file.c_str()) != 0) {
    spdlog::warn("cannot write {}: which tenant holds which shares is kept in memory only", options_.state_file);
  }
}

}  // namespace curelay::deviceplugin
