// The scheduler at work with real processes on the emulated driver: tenants' programs (bench/tenant_load.cc,
// through the shim) compete, the backend's scheduler gates their executors' launches, and backendctl reports what
// each got. Every executor has its own emulated GPU, so what these tests see is the gating itself: GPU time split
// by weight, and a high-priority tenant served ahead of low ones that still work whenever it idles.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "tests/integration/backend_process.h"
#include "tests/integration/tenant_helpers.h"

namespace curelay::testing {
namespace {

using nlohmann::json;

// Runs the load program as a tenant's client and returns its output.
std::string RunLoad(const BackendProcess& backend, const std::string& token, const std::string& args) {
  std::string command = "env";
  for (const auto& [key, value] : ClientEnv(backend, token)) command += " " + key + "=" + value;
  command += " LD_LIBRARY_PATH=" + std::string(CURELAY_SHIM_DIR) + " " + CURELAY_TENANT_LOAD_PATH + " " +
             CURELAY_TEST_PTX_PATH + " " + args + " 2>&1";
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  pclose(pipe);
  return output;
}

double Percentile99Us(const std::string& output) {
  std::smatch match;
  if (!std::regex_search(output, match, std::regex(R"(p99 ([0-9.]+))"))) return -1;
  return std::stod(match[1]);
}

json TenantStats(const BackendProcess& backend, const std::string& name) {
  const json stats = json::parse(Backendctl(backend, {"-o", "json", "stats"}).out, nullptr, false);
  if (!stats.is_object()) return json::object();
  for (const json& row : stats["tenants"]) {
    if (row["tenant"] == name) return row;
  }
  return json::object();
}

// GET http://127.0.0.1:port/path over a plain socket; the whole response, headers included.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return {};
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return {};
  }
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) response.append(buffer, static_cast<size_t>(n));
  close(fd);
  return response;
}

// The value of the sample `series` (name and labels, exactly as exported), or -1.
double Sample(const std::string& metrics, const std::string& series) {
  const size_t at = metrics.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(metrics.substr(at + series.size() + 2));
}

// The port the backend's metrics endpoint bound (it logs it), or -1.
int MetricsPort(const BackendProcess& backend) {
  std::smatch match;
  const std::string log = backend.Log();
  if (!std::regex_search(log, match, std::regex(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)"))) return -1;
  return std::stoi(match[1]);
}

class SchedulingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_.RequireTokens();
    backend_.AddArguments({"--metrics", "127.0.0.1:0"});
    ASSERT_TRUE(backend_.Start()) << backend_.Log();
  }
  // Two GPUs: tenants that may use every GPU work on the first, as programs do by default.
  BackendProcess backend_{"scheduling", {{"CURELAY_EMU_DEVICE_COUNT", "2"}}};
};

TEST_F(SchedulingTest, GpuTimeIsSplitByWeight) {
  const std::string light = AddTenant(backend_, "light", {"--weight", "1"});
  const std::string heavy = AddTenant(backend_, "heavy", {"--weight", "3"});
  // Both saturate for 4 s with 2 ms kernels, synchronizing every 4.
  auto first = std::async(std::launch::async, [&] { return RunLoad(backend_, light, "saturate 4 2000 4"); });
  auto second = std::async(std::launch::async, [&] { return RunLoad(backend_, heavy, "saturate 4 2000 4"); });
  const std::string light_out = first.get();
  const std::string heavy_out = second.get();
  ASSERT_NE(light_out.find("kernels"), std::string::npos) << light_out;
  ASSERT_NE(heavy_out.find("kernels"), std::string::npos) << heavy_out;
  const json light_stats = TenantStats(backend_, "light");
  const json heavy_stats = TenantStats(backend_, "heavy");
  const double light_seconds = light_stats.value("gpu_seconds", 0.0);
  const double heavy_seconds = heavy_stats.value("gpu_seconds", 0.0);
  ASSERT_GT(light_seconds + heavy_seconds, 0);
  EXPECT_NEAR(light_seconds / (light_seconds + heavy_seconds), 0.25, 0.05)
      << light_seconds << " s vs " << heavy_seconds << " s";
  // Work-conserving: the gating leaves the emulated GPUs busy most of the time.
  EXPECT_GT(light_seconds + heavy_seconds, 4 * 0.7);
  // Each kernel is timed at what it took (2 ms), including those timed from the end of the one before it: a chain
  // timed from each launch instead would count the queue ahead of it (about 5 ms a kernel with 4 queued). The margin
  // takes a slow 2-core CI machine, where the emulated GPU's threads lose their cores mid-kernel: 2.39 ms and
  // 3.18 ms were measured there (sessions 40 and 41), so a bound of 3.5 ms, well under the 5 ms failure.
  const double kernels = light_stats.value("kernels", 0.0) + heavy_stats.value("kernels", 0.0);
  ASSERT_GT(kernels, 0);
  EXPECT_GT((light_seconds + heavy_seconds) / kernels, 0.0018) << kernels << " kernels";
  EXPECT_LT((light_seconds + heavy_seconds) / kernels, 0.0035) << kernels << " kernels";
  // The weights held because the GPU was saturated: backendctl stats says for how long (turns applied). Most of the
  // 4 s; 1.97 s and 1.07 s were measured on a slow CI machine (session 41), so the floor is a quarter of the run.
  const json gpu = json::parse(Backendctl(backend_, {"-o", "json", "stats"}).out)["gpus"][0];
  EXPECT_GT(gpu.value("saturated_seconds", 0.0), 1.0) << gpu.dump();
  EXPECT_GE(gpu.value("saturations", uint64_t{0}), 1u) << gpu.dump();
}

// Kernels under 1 ms that the executor already knows are timed 1 in 16 (markers cost a launch-bound tenant as much
// as its launches). The untimed ones stay in flight while the executor's model of the GPU's queue runs them, so a
// tenant that keeps the GPU busy with them still saturates it (reported at dispatch as done, as before, they left
// the scheduler seeing an idle GPU, and no turns could start).
TEST_F(SchedulingTest, UntimedKernelsStillSaturateTheGpu) {
  const std::string token = AddTenant(backend_, "busy");
  // 700 us kernels, 40 queued between synchronizations, for 4 s: known kernels under the 1 ms from which every one
  // is timed (900 us ones came near it on a slow CI machine, where 70% were then timed).
  ASSERT_NE(RunLoad(backend_, token, "saturate 4 700 40").find("kernels"), std::string::npos);
  const json gpu = json::parse(Backendctl(backend_, {"-o", "json", "stats"}).out)["gpus"][0];
  EXPECT_GT(gpu.value("saturated_seconds", 0.0), 1.0) << gpu.dump();  // 0 if they left at dispatch
  std::smatch match;
  std::string log;
  ASSERT_TRUE(WaitFor([&] {
    log = backend_.Log();
    return std::regex_search(log, match, std::regex(R"(scheduled work: (\d+) pieces dispatched, (\d+) timed)"));
  }, std::chrono::seconds(5))) << log;
  // Sampled, not every one. A kernel whose estimate reaches 1 ms is always timed; these stay well under it.
  EXPECT_LT(std::stod(match[2]), std::stod(match[1]) / 2) << match[0];
}

TEST_F(SchedulingTest, HighPriorityIsServedFirstAndLowWorksWhenItIdles) {
  const std::string high = AddTenant(backend_, "interactive", {"--priority", "high"});
  const std::string low1 = AddTenant(backend_, "batch-1", {"--priority", "low"});
  const std::string low2 = AddTenant(backend_, "batch-2", {"--priority", "low"});
  // Requests of 4 x 1 ms kernels, 5 ms apart: alone, then with two low tenants saturating.
  const double alone_p99 = Percentile99Us(RunLoad(backend_, high, "requests 100 1000 5000 4"));
  ASSERT_GT(alone_p99, 0);
  auto load1 = std::async(std::launch::async, [&] { return RunLoad(backend_, low1, "saturate 3 500 8"); });
  auto load2 = std::async(std::launch::async, [&] { return RunLoad(backend_, low2, "saturate 3 500 8"); });
  usleep(300'000);
  const std::string loaded = RunLoad(backend_, high, "requests 100 1000 5000 4");
  load1.get();
  load2.get();
  const double loaded_p99 = Percentile99Us(loaded);
  ASSERT_GT(loaded_p99, 0) << loaded;
  // Held behind a low tenant's turn, a request would wait a whole slice (10 ms) or more; behind their in-flight
  // budget (2 ms each) at most that. (This machine's two cores also run both low executors, which costs some.)
  EXPECT_LT(loaded_p99, alone_p99 * 1.5 + 2000) << "alone p99 " << alone_p99 << " us, loaded " << loaded;
  // The low tenants still completed work, in the high one's idle time.
  EXPECT_GT(TenantStats(backend_, "batch-1").value("kernels", uint64_t{0}), 500u);
  EXPECT_GT(TenantStats(backend_, "batch-2").value("kernels", uint64_t{0}), 500u);
}

// A high tenant whose short kernels go mostly untimed, synchronizing after each request: its untimed work leaves the
// scheduler's books once done (its stream idle, or the modelled queue run), so the low tenant runs between requests.
// (On the GPU host its estimates, timed beside the low tenant's work, made the modelled queue long enough to starve
// the low tenant until the stream check was added; the emulated GPU does not inflate them, so this test guards the
// retirement itself.)
TEST_F(SchedulingTest, AnIdleHighTenantWithUntimedWorkDoesNotStarveLowOnes) {
  const std::string high = AddTenant(backend_, "interactive", {"--priority", "high"});
  const std::string low = AddTenant(backend_, "batch", {"--priority", "low"});
  auto load = std::async(std::launch::async, [&] { return RunLoad(backend_, low, "saturate 3 500 8"); });
  // Requests of 4 x 100 us kernels, 5 ms apart, for the whole 3 s.
  const std::string served = RunLoad(backend_, high, "requests 600 100 5000 4");
  ASSERT_GT(Percentile99Us(served), 0) << served;
  ASSERT_NE(load.get().find("kernels"), std::string::npos);
  // 3 s of 500 us kernels is 6000 alone; between the high tenant's requests the low one gets most of the GPU. A
  // starved low tenant gets next to nothing; a slow 2-core CI machine, running both tenants' executors, emulated
  // GPUs and load programs, gave it 952 and 1320 (session 41), so the floor is a tenth of alone.
  EXPECT_GT(TenantStats(backend_, "batch").value("kernels", uint64_t{0}), 600u);
}

TEST_F(SchedulingTest, SmallKnownKernelsAreTimedBySampling) {
  // Empty kernels, each waited for, so the GPU keeps up: once measured, most go without markers and count at their
  // estimate. (Kernels the emulated GPU falls behind on stay timed, as they should.)
  const std::string token = AddTenant(backend_, "small");
  // Enough kernels for sampling to show (1 in 64 timed once known): about 2,000 on an idle 2-core machine, about
  // 350 per second while it also compiles, so 3 s and a floor well under either.
  const std::string output = RunLoad(backend_, token, "saturate 3 0 1");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(output, match, std::regex(R"(kernels (\d+))"))) << output;
  const uint64_t kernels = std::stoull(match[1]);
  ASSERT_GT(kernels, 400u) << output;
  const json stats = TenantStats(backend_, "small");
  EXPECT_GE(stats.value("kernels", uint64_t{0}), kernels);  // every one completed for the scheduler
  EXPECT_GT(stats.value("gpu_seconds", 0.0), 0.0);
  std::string log;
  ASSERT_TRUE(WaitFor([&] {
    log = backend_.Log();
    return std::regex_search(log, match, std::regex(R"(scheduled work: (\d+) pieces dispatched, (\d+) timed)"));
  }, std::chrono::seconds(5))) << log;
  const double dispatched = std::stod(match[1]);
  const double timed = std::stod(match[2]);
  EXPECT_GE(dispatched, static_cast<double>(kernels));
  EXPECT_LT(timed, dispatched / 16) << timed << " of " << dispatched << " timed";
  // Still sampled: beyond the first measurements of the load's kernel (4), at least one in 128 (one in 64 expected).
  EXPECT_GE(timed, 4 + dispatched / 128) << timed << " of " << dispatched << " timed";
}

TEST_F(SchedulingTest, EachGpuIsScheduledOnItsOwn) {
  // Weights 1:3 on different GPUs: neither waits for the other's turns, so each has its GPU nearly all the time.
  const std::string left = AddTenant(backend_, "left", {"--gpus", "0", "--weight", "1"});
  const std::string right = AddTenant(backend_, "right", {"--gpus", "1", "--weight", "3"});
  auto first = std::async(std::launch::async, [&] { return RunLoad(backend_, left, "saturate 3 2000 4"); });
  auto second = std::async(std::launch::async, [&] { return RunLoad(backend_, right, "saturate 3 2000 4"); });
  ASSERT_NE(first.get().find("kernels"), std::string::npos);
  ASSERT_NE(second.get().find("kernels"), std::string::npos);
  const double left_seconds = TenantStats(backend_, "left").value("gpu_seconds", 0.0);
  const double right_seconds = TenantStats(backend_, "right").value("gpu_seconds", 0.0);
  // Sharing one GPU's turns, "left" would get a quarter of 3 s.
  EXPECT_GT(left_seconds, 3 * 0.7) << left_seconds << " s vs " << right_seconds << " s";
  EXPECT_GT(right_seconds, 3 * 0.7) << left_seconds << " s vs " << right_seconds << " s";
  // Each GPU's busy time is its own tenant's.
  const int port = MetricsPort(backend_);
  ASSERT_GT(port, 0) << backend_.Log();
  std::string metrics;
  ASSERT_TRUE(WaitFor([&] {
    metrics = HttpGet(port, "/metrics");
    return Sample(metrics, "curelay_gpu_busy_seconds_total{gpu=\"1\"}") >= right_seconds * 0.99;
  }, std::chrono::seconds(5))) << metrics;
  EXPECT_NEAR(Sample(metrics, "curelay_gpu_busy_seconds_total{gpu=\"0\"}"), left_seconds, 0.01 * left_seconds);
  // backendctl stats has the same per GPU.
  const json gpus = json::parse(Backendctl(backend_, {"-o", "json", "stats"}).out)["gpus"];
  ASSERT_EQ(gpus.size(), 2u) << gpus.dump();
  EXPECT_EQ(gpus[1]["gpu"], 1);
  EXPECT_NEAR(gpus[1]["busy_seconds"].get<double>(), right_seconds, 0.01 * right_seconds) << gpus.dump();
  EXPECT_NE(Backendctl(backend_, {"stats"}).out.find("UTILIZATION"), std::string::npos);
}

TEST_F(SchedulingTest, PrometheusEndpointReportsTenants) {
  const std::string token = AddTenant(backend_, "observed", {"--memory-quota", "64M", "--weight", "2"});
  ASSERT_NE(RunLoad(backend_, token, "saturate 1 2000 4").find("kernels"), std::string::npos);
  const int port = MetricsPort(backend_);
  ASSERT_GT(port, 0) << backend_.Log();
  // The endpoint's snapshot is refreshed about once a second.
  std::string metrics;
  ASSERT_TRUE(WaitFor([&] {
    metrics = HttpGet(port, "/metrics");
    return Sample(metrics, "curelay_tenant_kernels_total{tenant=\"observed\"}") > 0;
  }, std::chrono::seconds(5))) << metrics;
  EXPECT_NE(metrics.find("HTTP/1.1 200"), std::string::npos);
  EXPECT_NE(metrics.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_GT(Sample(metrics, "curelay_tenant_gpu_seconds_total{tenant=\"observed\"}"), 0.5);
  EXPECT_EQ(Sample(metrics, "curelay_tenant_memory_quota_bytes{tenant=\"observed\"}"), 64.0 * (1 << 20));
  EXPECT_GT(Sample(metrics, "curelay_tenant_queue_wait_seconds_count{tenant=\"observed\"}"), 0);
  EXPECT_NE(metrics.find("curelay_tenant_info{tenant=\"observed\",priority=\"normal\",weight=\"2\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_GT(Sample(metrics, "curelay_gpu_busy_seconds_total{gpu=\"0\"}"), 0.5);
  EXPECT_NE(HttpGet(port, "/other").find("HTTP/1.1 404"), std::string::npos);
}

}  // namespace
}  // namespace curelay::testing
