// curelay-device-plugin against a fake kubelet: the test plays the kubelet's side of the device-plugin API v1beta1
// on unix sockets in a temporary directory (Registration served on kubelet.sock, the plugin's DevicePlugin service
// called on the socket it registers), with a real backend (tokens required) on the emulated driver with two GPUs.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/deviceplugin_v1beta1.grpc.pb.h"
#include "tests/integration/backend_process.h"
#include "tests/integration/tenant_helpers.h"

namespace curelay::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr int kGpus = 2;
constexpr int kSharesPerGpu = 3;
constexpr uint64_t kMemoryPerShare = 64ull << 20;

// The kubelet's Registration service on <dir>/kubelet.sock, keeping every request it receives.
class FakeKubelet final : public v1beta1::Registration::Service {
 public:
  explicit FakeKubelet(const std::string& dir) : socket_(dir + "/kubelet.sock") {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeKubelet() override { Stop(); }
  bool serving() const { return server_ != nullptr; }
  void Stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + 1s);
    server_.reset();
    unlink(socket_.c_str());
  }
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request, v1beta1::Empty*) override {
    std::lock_guard lock(mutex_);
    registrations_.push_back(*request);
    return grpc::Status::OK;
  }
  std::vector<v1beta1::RegisterRequest> Registrations() {
    std::lock_guard lock(mutex_);
    return registrations_;
  }

 private:
  std::string socket_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mutex_;
  std::vector<v1beta1::RegisterRequest> registrations_;
};

// The kubelet's ListAndWatch stream: every list the plugin sent, read on a thread.
class DeviceStream {
 public:
  explicit DeviceStream(v1beta1::DevicePlugin::Stub* stub) {
    reader_ = stub->ListAndWatch(&context_, v1beta1::Empty());
    thread_ = std::thread([this] {
      v1beta1::ListAndWatchResponse list;
      while (reader_->Read(&list)) {
        std::lock_guard lock(mutex_);
        lists_.push_back(list);
      }
    });
  }
  ~DeviceStream() {
    context_.TryCancel();
    thread_.join();
  }
  // Waits until the latest list is `health` for each of `ids` and holds nothing else.
  bool WaitForHealth(const std::map<std::string, std::string>& expected, std::chrono::milliseconds timeout) {
    return WaitFor([&] { return Latest() == expected; }, timeout);
  }
  std::map<std::string, std::string> Latest() {
    std::lock_guard lock(mutex_);
    std::map<std::string, std::string> health;
    if (lists_.empty()) return health;
    for (const auto& device : lists_.back().devices()) health[device.id()] = device.health();
    return health;
  }
  size_t count() {
    std::lock_guard lock(mutex_);
    return lists_.size();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1beta1::ListAndWatchResponse>> reader_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<v1beta1::ListAndWatchResponse> lists_;
};

std::map<std::string, std::string> AllShares(const std::string& health, std::map<int, std::string> per_gpu = {}) {
  std::map<std::string, std::string> shares;
  for (int gpu = 0; gpu < kGpus; ++gpu) {
    for (int index = 0; index < kSharesPerGpu; ++index) {
      const auto special = per_gpu.find(gpu);
      shares["gpu" + std::to_string(gpu) + "-share" + std::to_string(index)] =
          special != per_gpu.end() ? special->second : health;
    }
  }
  return shares;
}

class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/curelay-dp-XXXXXX";
    dir_ = mkdtemp(pattern);
    kubelet_dir_ = dir_ + "/device-plugins";
    mkdir(kubelet_dir_.c_str(), 0755);
    backend_.RequireTokens();
    ASSERT_TRUE(backend_.Start()) << backend_.Log();
    kubelet_ = std::make_unique<FakeKubelet>(kubelet_dir_);
    ASSERT_TRUE(kubelet_->serving());
    StartPlugin();
  }
  void TearDown() override {
    StopPlugin();
    kubelet_.reset();
    std::system(("rm -rf " + dir_).c_str());
  }
  void StartPlugin() {
    plugin_log_ = dir_ + "/plugin.log";
    plugin_ = fork();
    if (plugin_ == 0) {
      const int log = open(plugin_log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(log, 1);
      dup2(log, 2);
      const std::string memory = std::to_string(kMemoryPerShare);
      const std::string shares = std::to_string(kSharesPerGpu);
      const std::string endpoint = backend_.admin_endpoint();
      const std::string state = dir_ + "/tenants.json";
      execl(CURELAY_DEVICE_PLUGIN_PATH, CURELAY_DEVICE_PLUGIN_PATH, "--kubelet-dir", kubelet_dir_.c_str(),
            "--admin-endpoint", endpoint.c_str(), "--shares-per-gpu", shares.c_str(), "--memory-per-share",
            memory.c_str(), "--cdi-device", "curelay.io/gpu=local", "--poll-interval-ms", "100", "--state-file",
            state.c_str(), "--log-level", "debug", nullptr);
      _exit(127);
    }
  }
  void StopPlugin() {
    if (plugin_ <= 0) return;
    kill(plugin_, SIGTERM);
    if (!WaitFor([&] { return waitpid(plugin_, nullptr, WNOHANG) == plugin_; }, 10s)) {
      ADD_FAILURE() << "the plugin did not stop on SIGTERM\n" << PluginLog();
      kill(plugin_, SIGKILL);
      waitpid(plugin_, nullptr, 0);
    }
    plugin_ = -1;
  }
  std::string PluginLog() const { return ReadFile(plugin_log_); }
  // Waits for the `count`th registration and connects to the socket it names, as the kubelet does.
  std::unique_ptr<v1beta1::DevicePlugin::Stub> Connect(size_t count) {
    if (!WaitFor([&] { return kubelet_->Registrations().size() >= count; }, 10s)) return nullptr;
    const std::string socket = kubelet_dir_ + "/" + kubelet_->Registrations()[count - 1].endpoint();
    return v1beta1::DevicePlugin::NewStub(
        grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  }
  grpc::Status Allocate(v1beta1::DevicePlugin::Stub* stub, const std::vector<std::string>& ids,
                        v1beta1::AllocateResponse* response) {
    v1beta1::AllocateRequest request;
    auto* container = request.add_container_requests();
    for (const std::string& id : ids) container->add_devices_ids(id);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 20s);
    return stub->Allocate(&context, request, response);
  }
  std::string InitWith(const std::string& token) { return RunClient({"init"}, ClientEnv(backend_, token), 30s).output; }

  std::string dir_, kubelet_dir_, plugin_log_;
  BackendProcess backend_{"deviceplugin", {{"CURELAY_EMU_DEVICE_COUNT", std::to_string(kGpus)}}};
  std::unique_ptr<FakeKubelet> kubelet_;
  pid_t plugin_ = -1;
};

TEST_F(DevicePluginTest, RegistersAdvertisesSharesAndAllocatesTenants) {
  auto stub = Connect(1);
  ASSERT_TRUE(stub) << PluginLog();
  const v1beta1::RegisterRequest registration = kubelet_->Registrations()[0];
  EXPECT_EQ(registration.version(), "v1beta1");
  EXPECT_EQ(registration.resource_name(), "curelay.io/gpu");
  EXPECT_EQ(registration.endpoint(), "curelay.sock");
  EXPECT_TRUE(registration.options().get_preferred_allocation_available());
  EXPECT_FALSE(registration.options().pre_start_required());
  {
    grpc::ClientContext context;
    v1beta1::DevicePluginOptions options;
    ASSERT_TRUE(stub->GetDevicePluginOptions(&context, v1beta1::Empty(), &options).ok());
    EXPECT_TRUE(options.get_preferred_allocation_available());
  }

  DeviceStream stream(stub.get());
  ASSERT_TRUE(stream.WaitForHealth(AllShares("Healthy"), 15s)) << PluginLog();

  // GetPreferredAllocation: GPU 1 partly taken, must_include on GPU 0.
  {
    v1beta1::PreferredAllocationRequest request;
    auto* packed = request.add_container_requests();
    for (const char* id : {"gpu0-share0", "gpu0-share1", "gpu0-share2", "gpu1-share2"}) {
      packed->add_available_device_ids(id);
    }
    packed->set_allocation_size(1);
    auto* around = request.add_container_requests();
    for (const auto& [id, health] : AllShares("Healthy")) around->add_available_device_ids(id);
    around->add_must_include_device_ids("gpu0-share1");
    around->set_allocation_size(3);
    grpc::ClientContext context;
    v1beta1::PreferredAllocationResponse response;
    ASSERT_TRUE(stub->GetPreferredAllocation(&context, request, &response).ok());
    ASSERT_EQ(response.container_responses_size(), 2);
    EXPECT_EQ(std::vector<std::string>(response.container_responses(0).device_ids().begin(),
                                       response.container_responses(0).device_ids().end()),
              std::vector<std::string>{"gpu1-share2"});
    EXPECT_EQ(std::vector<std::string>(response.container_responses(1).device_ids().begin(),
                                       response.container_responses(1).device_ids().end()),
              (std::vector<std::string>{"gpu0-share0", "gpu0-share1", "gpu0-share2"}));
  }

  // Allocate two shares of GPU 1: a tenant on that GPU with weight 2 and two shares' memory, whose token works.
  v1beta1::AllocateResponse first;
  ASSERT_TRUE(Allocate(stub.get(), {"gpu1-share1", "gpu1-share0"}, &first).ok()) << PluginLog();
  ASSERT_EQ(first.container_responses_size(), 1);
  const auto& container = first.container_responses(0);
  ASSERT_EQ(container.cdi_devices_size(), 1);
  EXPECT_EQ(container.cdi_devices(0).name(), "curelay.io/gpu=local");
  ASSERT_TRUE(container.envs().contains("CURELAY_TOKEN"));
  const std::string token = container.envs().at("CURELAY_TOKEN");
  EXPECT_EQ(token.rfind("crl_", 0), 0u) << token;
  EXPECT_NE(InitWith(token).find("cuInit 0 "), std::string::npos);
  const auto devices = RunClient({"devices"}, ClientEnv(backend_, token), 30s);
  EXPECT_NE(devices.output.find("devices 1 "), std::string::npos) << devices.output;  // GPU 1 alone
  const CommandResult shown = Backendctl(backend_, {"-o", "json", "tenant", "show", "k8s-gpu1-share0"});
  ASSERT_EQ(shown.exit_code, 0) << shown.out;
  const json tenant = json::parse(shown.out)["tenant"];
  EXPECT_EQ(tenant["gpus"], json::array({1}));
  EXPECT_EQ(tenant["weight"], 2);
  EXPECT_EQ(tenant["memory_quota_bytes"], 2 * kMemoryPerShare);

  // One of those shares allocated again (its pod is gone): the old tenant is removed, its token refused.
  v1beta1::AllocateResponse second;
  ASSERT_TRUE(Allocate(stub.get(), {"gpu1-share1"}, &second).ok()) << PluginLog();
  const std::string second_token = second.container_responses(0).envs().at("CURELAY_TOKEN");
  EXPECT_NE(second_token, token);
  EXPECT_NE(InitWith(token).find("cuInit 800 "), std::string::npos);  // CUDA_ERROR_NOT_PERMITTED
  EXPECT_NE(InitWith(second_token).find("cuInit 0 "), std::string::npos);
  const CommandResult listed = Backendctl(backend_, {"-o", "json", "tenant", "list"});
  const json tenants = json::parse(listed.out)["tenants"];
  std::vector<std::string> names;
  for (const json& t : tenants) names.push_back(t["name"]);
  EXPECT_EQ(names, std::vector<std::string>{"k8s-gpu1-share1"}) << listed.out;

  // Devices the plugin does not advertise are refused.
  v1beta1::AllocateResponse refused;
  EXPECT_EQ(Allocate(stub.get(), {"gpu2-share0"}, &refused).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Allocate(stub.get(), {"gpu0-share3"}, &refused).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(DevicePluginTest, HealthFollowsTheBackendAndItsGpus) {
  auto stub = Connect(1);
  ASSERT_TRUE(stub) << PluginLog();
  DeviceStream stream(stub.get());
  ASSERT_TRUE(stream.WaitForHealth(AllShares("Healthy"), 15s)) << PluginLog();

  backend_.Stop();  // unreachable: every share unhealthy, and Allocate cannot make tenants
  EXPECT_TRUE(stream.WaitForHealth(AllShares("Unhealthy"), 10s)) << PluginLog();
  v1beta1::AllocateResponse response;
  EXPECT_EQ(Allocate(stub.get(), {"gpu0-share0"}, &response).error_code(), grpc::StatusCode::UNAVAILABLE);

  ASSERT_TRUE(backend_.Start()) << backend_.Log();
  EXPECT_TRUE(stream.WaitForHealth(AllShares("Healthy"), 15s)) << PluginLog();
  ASSERT_TRUE(Allocate(stub.get(), {"gpu0-share0"}, &response).ok()) << PluginLog();
  EXPECT_NE(InitWith(response.container_responses(0).envs().at("CURELAY_TOKEN")).find("cuInit 0 "),
            std::string::npos);

  // Back with one GPU: GPU 1's shares stay advertised, unhealthy.
  backend_.Stop();
  backend_.SetEnv("CURELAY_EMU_DEVICE_COUNT", "1");
  ASSERT_TRUE(backend_.Start()) << backend_.Log();
  EXPECT_TRUE(stream.WaitForHealth(AllShares("Healthy", {{1, "Unhealthy"}}), 15s)) << PluginLog();
}

TEST_F(DevicePluginTest, RegistersAgainWhenTheKubeletRestarts) {
  auto stub = Connect(1);
  ASSERT_TRUE(stub) << PluginLog();
  // A restarting kubelet removes the plugins' sockets and serves a new kubelet.sock.
  kubelet_->Stop();
  unlink((kubelet_dir_ + "/curelay.sock").c_str());
  kubelet_ = std::make_unique<FakeKubelet>(kubelet_dir_);
  ASSERT_TRUE(kubelet_->serving());
  stub = Connect(1);
  ASSERT_TRUE(stub) << PluginLog();
  EXPECT_EQ(kubelet_->Registrations()[0].resource_name(), "curelay.io/gpu");
  DeviceStream stream(stub.get());
  EXPECT_TRUE(stream.WaitForHealth(AllShares("Healthy"), 15s)) << PluginLog();
}

}  // namespace
}  // namespace curelay::testing
