// backendctl's CDI spec: what the podman test (tests/containers/) cannot show cheaply: refusals and the version rule.
#include "backendctl/cdi_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "transport/zmq/zmq_curve.h"

namespace curelay::backendctl {
namespace {

class CdiSpecTest : public ::testing::Test {
 protected:
  void SetUp() override { std::ofstream(shim_) << "not really a library"; }
  void TearDown() override { unlink(shim_.c_str()); }
  std::string shim_ = "/tmp/curelay-cdi-shim-" + std::to_string(getpid()) + ".so.1";
};

TEST_F(CdiSpecTest, LocalDeviceMountsTheRuntimeDirectoryAndHidesItsPrivatePart) {
  CdiOptions options;
  options.shim_path = shim_;
  std::string error;
  const auto spec = BuildCdiSpec(options, &error);
  ASSERT_FALSE(spec.is_null()) << error;
  EXPECT_EQ(spec["kind"], "curelay.io/gpu");
  EXPECT_EQ(spec["cdiVersion"], "0.4.0");  // the tmpfs mount's type needs 0.4.0; podman 4.3 reads up to 0.5.0
  ASSERT_EQ(spec["devices"].size(), 1u);
  const auto& edits = spec["devices"][0]["containerEdits"];
  EXPECT_EQ(edits["env"][0], "CURELAY_ENDPOINT=ipc:///dev/shm/curelay/backend.sock");
  const auto& mounts = edits["mounts"];
  ASSERT_EQ(mounts.size(), 4u);
  EXPECT_EQ(mounts[0]["hostPath"], shim_);
  EXPECT_EQ(mounts[0]["containerPath"], "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_EQ(mounts[2]["containerPath"], "/dev/shm/curelay");
  EXPECT_EQ(mounts[3]["containerPath"], "/dev/shm/curelay/private");  // after the directory, so it covers it
  EXPECT_EQ(mounts[3]["type"], "tmpfs");
  EXPECT_EQ(spec.dump().find("CURELAY_TOKEN"), std::string::npos);  // tokens are per container, never in the spec
}

TEST_F(CdiSpecTest, RemoteOnlySpecIsVersionZeroThreeAndCarriesTheEndpoint) {
  CdiOptions options;
  options.shim_path = shim_;
  options.local = false;
  options.remote_endpoint = "tcp://gpu-host:7000";
  options.nvml_path = shim_;
  std::string error;
  const auto spec = BuildCdiSpec(options, &error);
  ASSERT_FALSE(spec.is_null()) << error;
  EXPECT_EQ(spec["cdiVersion"], "0.3.0");
  EXPECT_EQ(spec["devices"][0]["name"], "remote");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["env"][0], "CURELAY_ENDPOINT=tcp://gpu-host:7000");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["mounts"][2]["containerPath"],
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
}

// The backend's CURVE public key is no secret: the remote device carries it; a malformed one is refused.
TEST_F(CdiSpecTest, RemoteDeviceCarriesTheServersCurveKey) {
  CdiOptions options;
  options.shim_path = shim_;
  options.local = false;
  options.remote_endpoint = "tcp://gpu-host:7000";
  std::string secret;
  ASSERT_TRUE(transport::NewCurveKeyPair(&options.server_key, &secret));
  std::string error;
  const auto spec = BuildCdiSpec(options, &error);
  ASSERT_FALSE(spec.is_null()) << error;
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["env"][1], "CURELAY_SERVER_KEY=" + options.server_key);
  options.server_key = "too-short";
  EXPECT_TRUE(BuildCdiSpec(options, &error).is_null());
  EXPECT_NE(error.find("--server-key"), std::string::npos) << error;
}

TEST_F(CdiSpecTest, UnusableOptionsAreRefusedWithAReason) {
  const auto refused = [](CdiOptions options) {
    std::string error;
    const auto spec = BuildCdiSpec(options, &error);
    EXPECT_TRUE(spec.is_null());
    return error;
  };
  CdiOptions options;
  options.shim_path = "/nonexistent/libcuda.so.1";
  EXPECT_NE(refused(options).find("is not a file"), std::string::npos);
  options.shim_path = shim_;
  options.remote_endpoint = "ipc:///tmp/x.sock";
  EXPECT_NE(refused(options).find("not a tcp:// or rdma://"), std::string::npos);
  options.remote_endpoint.clear();
  options.local = false;
  EXPECT_NE(refused(options).find("no device"), std::string::npos);
  options.local = true;
  options.runtime_dir = "relative/dir";
  EXPECT_NE(refused(options).find("absolute"), std::string::npos);
  options.runtime_dir = "/dev/shm/curelay";
  options.local_endpoint = "tcp://127.0.0.1:1";
  EXPECT_NE(refused(options).find("not an ipc://"), std::string::npos);
}

}  // namespace
}  // namespace curelay::backendctl
