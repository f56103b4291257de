// The backend's TOML configuration: known keys are read, and bad values or unknown keys are refused with a clear
// error (a typo must not silently keep a default).
#include "backend/backend_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace curelay::backend {
namespace {

class BackendConfigTest : public ::testing::Test {
 protected:
  bool Load(const std::string& text, std::string* error) {
    std::ofstream(path_) << text;
    return LoadBackendConfig(path_, &config_, error);
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::string path_ = "/tmp/curelay-config-test-" + std::to_string(getpid()) + ".toml";
  BackendConfig config_;
};

TEST_F(BackendConfigTest, SchedulerKeysAreRead) {
  std::string error;
  ASSERT_TRUE(Load("[scheduler]\nslice_us = 5000\nsaturation_us = 3000\nsaturation_busy_percent = 75\n"
                   "low_priority_share_percent = 10\nlow_priority_wait_us = 0\n",
                   &error))
      << error;
  EXPECT_EQ(config_.low_priority_share_percent, 10);
  EXPECT_EQ(config_.low_priority_wait_us, 0);
  EXPECT_EQ(config_.slice_us, 5000);
  EXPECT_EQ(config_.saturation_us, 3000);
  EXPECT_EQ(config_.saturation_busy_percent, 75);
  EXPECT_EQ(config_.low_priority_budget_us, BackendConfig{}.low_priority_budget_us);  // absent: the default
}

TEST_F(BackendConfigTest, DefaultsHoldWithoutTheSection) {
  std::string error;
  ASSERT_TRUE(Load("[backend]\nwarm_pool = 3\n", &error)) << error;
  EXPECT_EQ(config_.warm_pool, 3u);
  EXPECT_EQ(config_.saturation_busy_percent, 90);
  EXPECT_EQ(config_.saturation_us, 2000);
  EXPECT_EQ(config_.low_priority_share_percent, 0);
  EXPECT_EQ(config_.low_priority_wait_us, 500);
}

TEST_F(BackendConfigTest, TheHostNvmlIsNamedOrTurnedOff) {
  std::string error;
  ASSERT_TRUE(Load("[backend]\nwarm_pool = 1\n", &error)) << error;
  EXPECT_EQ(config_.nvml, "libnvidia-ml.so.1");  // absent: found by name, as the driver is
  ASSERT_TRUE(Load("[backend]\nnvml = \"/opt/nvidia/libnvidia-ml.so.1\"\n", &error)) << error;
  EXPECT_EQ(config_.nvml, "/opt/nvidia/libnvidia-ml.so.1");
  config_ = BackendConfig{};
  ASSERT_TRUE(Load("[backend]\nnvml = \"\"\n", &error)) << error;
  EXPECT_EQ(config_.nvml, "");  // no host facts for tenants
  EXPECT_FALSE(Load("[backend]\nnvml = 1\n", &error));
  EXPECT_NE(error.find("nvml"), std::string::npos) << error;
}

TEST_F(BackendConfigTest, BadSchedulerValuesAreRefused) {
  std::string error;
  EXPECT_FALSE(Load("[scheduler]\nlow_priority_share_percent = 101\n", &error));
  EXPECT_NE(error.find("low_priority_share_percent"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(Load("[scheduler]\nsaturation_busy_percent = 101\n", &error));
  EXPECT_NE(error.find("saturation_busy_percent"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(Load("[scheduler]\nsaturation_busy_percent = -1\n", &error));
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_FALSE(Load("[scheduler]\nlow_priority_wait_us = -1\n", &error));
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_FALSE(Load("[scheduler]\nlow_priority_wait_us = 1000001\n", &error));
  EXPECT_NE(error.find("low_priority_wait_us"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(Load("[scheduler]\nslice_us = 0\n", &error));
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_FALSE(Load("[scheduler]\nsaturation_busy = 90\n", &error));  // a misspelt key
  EXPECT_NE(error.find("saturation_busy"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(Load("[scheduler]\nsaturation_busy_percent = \"ninety\"\n", &error));  // the wrong type
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_FALSE(Load("[scheduler\n", &error));  // not TOML
  EXPECT_FALSE(error.empty());
}

}  // namespace
}  // namespace curelay::backend

namespace curelay::backend {
namespace {

TEST_F(BackendConfigTest, SecurityAndSwapSectionsAreRead) {
  // [security] was once refused as an unknown section by the top-level key check.
  std::string error;
  ASSERT_TRUE(Load("[security]\ncurve = true\n[swap]\nhost_budget_mib = 4096\nreserve_mib = 512\nswitch_time_s = 20\n"
                   "max_swap_percent = 5\nidle_release_ms = 250\nlock_ahead = false\n",
                   &error))
      << error;
  EXPECT_TRUE(config_.curve);
  EXPECT_EQ(config_.swap_host_budget_mib, 4096);
  EXPECT_EQ(config_.swap_reserve_mib, 512);
  EXPECT_EQ(config_.swap_switch_time_s, 20);
  EXPECT_EQ(config_.swap_max_percent, 5);
  EXPECT_EQ(config_.swap_idle_release_ms, 250);
  EXPECT_FALSE(config_.swap_lock_ahead);
}

TEST_F(BackendConfigTest, BadSwapValuesAreRefused) {
  std::string error;
  EXPECT_FALSE(Load("[swap]\nmax_swap_percent = 0\n", &error));
  EXPECT_NE(error.find("max_swap_percent"), std::string::npos) << error;
  EXPECT_FALSE(Load("[swap]\nmin_switch_s = 30\nmax_switch_s = 10\n", &error));
  EXPECT_FALSE(Load("[swap]\nhost_budget = 3\n", &error));
  EXPECT_NE(error.find("unknown key 'host_budget'"), std::string::npos) << error;
}

}  // namespace
}  // namespace curelay::backend
