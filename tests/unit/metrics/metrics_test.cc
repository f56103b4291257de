// The Prometheus endpoint: the text rendering (checked against hand-written output), the queue-wait histogram,
// listen-address parsing, and a real HTTP round trip through MetricsServer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "backend/metrics/listen_address.h"
#include "backend/metrics/metrics_server.h"
#include "backend/metrics/metrics_snapshot.h"
#include "backend/metrics/prometheus_text.h"

namespace curelay::backend {
namespace {

MetricsSnapshot SmallSnapshot() {
  MetricsSnapshot snapshot;
  TenantMetrics alpha;
  alpha.name = "alpha";
  alpha.priority = "high";
  alpha.weight = 3;
  alpha.gpu_seconds = 12.5;
  alpha.active_seconds = 20.25;
  alpha.memory_bytes = 1048576;
  alpha.memory_peak_bytes = 2097152;
  alpha.quota_bytes = 0;
  alpha.kernels = 42;
  alpha.sessions = 2;
  alpha.swapped_sessions = 1;
  alpha.swap_outs = 4;
  alpha.swap_ins = 3;
  alpha.swap_seconds = 1.5;
  alpha.queue_wait.bucket_counts = {0, 1, 1, 2, 2, 2, 2, 2, 2, 3};
  alpha.queue_wait.sum_seconds = 2.25;
  alpha.queue_wait.count = 3;
  snapshot.tenants.push_back(alpha);
  GpuMetrics gpu;
  gpu.index = 0;
  gpu.utilization = 0.25;
  gpu.busy_seconds = 100;
  gpu.saturated_seconds = 12.5;
  gpu.saturations = 7;
  snapshot.gpus.push_back(gpu);
  return snapshot;
}

constexpr char kSmallSnapshotText[] =
    "# HELP curelay_tenant_gpu_seconds_total GPU time charged to the tenant, in seconds.\n"
    "# TYPE curelay_tenant_gpu_seconds_total counter\n"
    "curelay_tenant_gpu_seconds_total{tenant=\"alpha\"} 12.5\n"
    "# HELP curelay_tenant_active_seconds_total Time the tenant had work pending or in flight on a GPU, summed over "
    "GPUs, in seconds.\n"
    "# TYPE curelay_tenant_active_seconds_total counter\n"
    "curelay_tenant_active_seconds_total{tenant=\"alpha\"} 20.25\n"
    "# HELP curelay_tenant_memory_bytes Device memory the tenant's sessions hold, in bytes.\n"
    "# TYPE curelay_tenant_memory_bytes gauge\n"
    "curelay_tenant_memory_bytes{tenant=\"alpha\"} 1048576\n"
    "# HELP curelay_tenant_memory_peak_bytes Highest device memory the tenant's sessions held, in bytes.\n"
    "# TYPE curelay_tenant_memory_peak_bytes gauge\n"
    "curelay_tenant_memory_peak_bytes{tenant=\"alpha\"} 2097152\n"
    "# HELP curelay_tenant_memory_quota_bytes The tenant's device memory quota, in bytes; 0 means no quota.\n"
    "# TYPE curelay_tenant_memory_quota_bytes gauge\n"
    "curelay_tenant_memory_quota_bytes{tenant=\"alpha\"} 0\n"
    "# HELP curelay_tenant_kernels_total Kernels the tenant launched.\n"
    "# TYPE curelay_tenant_kernels_total counter\n"
    "curelay_tenant_kernels_total{tenant=\"alpha\"} 42\n"
    "# HELP curelay_tenant_sessions Sessions the tenant has open.\n"
    "# TYPE curelay_tenant_sessions gauge\n"
    "curelay_tenant_sessions{tenant=\"alpha\"} 2\n"
    "# HELP curelay_tenant_swapped_sessions The tenant's sessions swapped out of their GPU now (memory turns).\n"
    "# TYPE curelay_tenant_swapped_sessions gauge\n"
    "curelay_tenant_swapped_sessions{tenant=\"alpha\"} 1\n"
    "# HELP curelay_tenant_swap_outs_total Times the tenant's sessions were swapped out.\n"
    "# TYPE curelay_tenant_swap_outs_total counter\n"
    "curelay_tenant_swap_outs_total{tenant=\"alpha\"} 4\n"
    "# HELP curelay_tenant_swap_ins_total Times the tenant's sessions were swapped back in.\n"
    "# TYPE curelay_tenant_swap_ins_total counter\n"
    "curelay_tenant_swap_ins_total{tenant=\"alpha\"} 3\n"
    "# HELP curelay_tenant_swap_seconds_total Time the tenant's sessions spent swapping out and in, in seconds.\n"
    "# TYPE curelay_tenant_swap_seconds_total counter\n"
    "curelay_tenant_swap_seconds_total{tenant=\"alpha\"} 1.5\n"
    "# HELP curelay_tenant_queue_wait_seconds Time the tenant's work waited for the GPU, in seconds.\n"
    "# TYPE curelay_tenant_queue_wait_seconds histogram\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"0.0001\"} 0\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"0.0005\"} 1\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"0.001\"} 1\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"0.005\"} 2\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"0.01\"} 2\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"0.05\"} 2\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"0.1\"} 2\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"0.5\"} 2\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"1\"} 2\n"
    "curelay_tenant_queue_wait_seconds_bucket{tenant=\"alpha\",le=\"+Inf\"} 3\n"
    "curelay_tenant_queue_wait_seconds_sum{tenant=\"alpha\"} 2.25\n"
    "curelay_tenant_queue_wait_seconds_count{tenant=\"alpha\"} 3\n"
    "# HELP curelay_tenant_info Tenant scheduling class; always 1, the labels carry the information.\n"
    "# TYPE curelay_tenant_info gauge\n"
    "curelay_tenant_info{tenant=\"alpha\",priority=\"high\",weight=\"3\"} 1\n"
    "# HELP curelay_gpu_utilization Fraction of the last second the GPU ran scheduled work (overlapping pieces once), 0 to 1.\n"
    "# TYPE curelay_gpu_utilization gauge\n"
    "curelay_gpu_utilization{gpu=\"0\"} 0.25\n"
    "# HELP curelay_gpu_busy_seconds_total GPU time of the scheduled work completed on the GPU, summed over pieces, in seconds.\n"
    "# TYPE curelay_gpu_busy_seconds_total counter\n"
    "curelay_gpu_busy_seconds_total{gpu=\"0\"} 100\n"
    "# HELP curelay_gpu_saturated_seconds_total Time the scheduler found the GPU saturated (tenants took turns), in "
    "seconds.\n"
    "# TYPE curelay_gpu_saturated_seconds_total counter\n"
    "curelay_gpu_saturated_seconds_total{gpu=\"0\"} 12.5\n"
    "# HELP curelay_gpu_saturations_total Times the GPU became saturated (turns began).\n"
    "# TYPE curelay_gpu_saturations_total counter\n"
    "curelay_gpu_saturations_total{gpu=\"0\"} 7\n";

TEST(PrometheusText, RendersSmallSnapshotExactly) {
  EXPECT_EQ(RenderPrometheusText(SmallSnapshot()), kSmallSnapshotText);
}

TEST(PrometheusText, EmptySnapshotStillDescribesEveryFamily) {
  const std::string text = RenderPrometheusText(MetricsSnapshot{});
  int type_lines = 0;
  for (size_t at = text.find("# TYPE "); at != std::string::npos; at = text.find("# TYPE ", at + 1)) ++type_lines;
  EXPECT_EQ(type_lines, 17);
  EXPECT_EQ(text.find("{"), std::string::npos);  // no samples
}

TEST(PrometheusText, KeepsTenantAndGpuOrder) {
  MetricsSnapshot snapshot;
  for (const char* name : {"zeta", "alpha", "mid"}) {
    TenantMetrics tenant;
    tenant.name = name;
    snapshot.tenants.push_back(tenant);
  }
  for (int index : {1, 0}) snapshot.gpus.push_back(GpuMetrics{index, 0, 0});
  const std::string text = RenderPrometheusText(snapshot);
  const size_t zeta = text.find("curelay_tenant_sessions{tenant=\"zeta\"}");
  const size_t alpha = text.find("curelay_tenant_sessions{tenant=\"alpha\"}");
  const size_t mid = text.find("curelay_tenant_sessions{tenant=\"mid\"}");
  ASSERT_NE(zeta, std::string::npos);
  EXPECT_LT(zeta, alpha);
  EXPECT_LT(alpha, mid);
  EXPECT_LT(text.find("curelay_gpu_utilization{gpu=\"1\"}"), text.find("curelay_gpu_utilization{gpu=\"0\"}"));
  EXPECT_EQ(RenderPrometheusText(snapshot), text);
}

TEST(PrometheusText, EscapesLabelValues) {
  EXPECT_EQ(EscapePrometheusLabelValue("plain-name_1"), "plain-name_1");
  EXPECT_EQ(EscapePrometheusLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");

  MetricsSnapshot snapshot;
  TenantMetrics tenant;
  tenant.name = "we\"ird\\\nname";
  tenant.priority = "lo\"w";
  tenant.weight = 7;
  snapshot.tenants.push_back(tenant);
  const std::string text = RenderPrometheusText(snapshot);
  EXPECT_NE(text.find("curelay_tenant_kernels_total{tenant=\"we\\\"ird\\\\\\nname\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("curelay_tenant_info{tenant=\"we\\\"ird\\\\\\nname\",priority=\"lo\\\"w\",weight=\"7\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("_bucket{tenant=\"we\\\"ird\\\\\\nname\",le=\"+Inf\"} 0\n"), std::string::npos);
  // A raw newline inside a value would split a sample in two: every line must be a comment or a sample.
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    ASSERT_NE(end, std::string::npos) << "the text must end with a newline";
    const std::string line = text.substr(begin, end - begin);
    EXPECT_TRUE(line.rfind("# ", 0) == 0 || line.rfind("curelay_", 0) == 0) << line;
    begin = end + 1;
  }
}

TEST(PrometheusText, FormatsDoubles) {
  EXPECT_EQ(FormatPrometheusDouble(0.0001), "0.0001");
  EXPECT_EQ(FormatPrometheusDouble(0.0005), "0.0005");
  EXPECT_EQ(FormatPrometheusDouble(1), "1");
  EXPECT_EQ(FormatPrometheusDouble(0), "0");
  EXPECT_EQ(FormatPrometheusDouble(12.5), "12.5");
  EXPECT_EQ(FormatPrometheusDouble(0.1), "0.1");
  EXPECT_EQ(FormatPrometheusDouble(1e-05), "1e-05");
  EXPECT_EQ(FormatPrometheusDouble(1e21), "1e+21");
  EXPECT_EQ(FormatPrometheusDouble(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatPrometheusDouble(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatPrometheusDouble(std::nan("")), "NaN");
}

TEST(QueueWaitHistogram, BucketsAreCumulativeAndInfEqualsCount) {
  QueueWaitHistogram histogram;
  for (double wait : {0.00005, 0.0001, 0.0003, 0.001, 0.002, 0.02, 0.3, 0.75, 1.0, 5.0, 60.0}) histogram.Observe(wait);
  // Upper bounds are inclusive: 0.0001, 0.001 and 1.0 land in their own buckets.
  const std::array<uint64_t, kQueueWaitBucketCount> expected = {2, 3, 4, 5, 5, 6, 6, 7, 9, 11};
  EXPECT_EQ(histogram.bucket_counts, expected);
  for (size_t i = 1; i < kQueueWaitBucketCount; ++i) {
    EXPECT_LE(histogram.bucket_counts[i - 1], histogram.bucket_counts[i]) << "bucket " << i;
  }
  EXPECT_EQ(histogram.count, 11u);
  EXPECT_EQ(histogram.bucket_counts.back(), histogram.count);
  EXPECT_NEAR(histogram.sum_seconds, 67.07345, 1e-9);
}

TEST(QueueWaitHistogram, NegativeAndNanWaitsCountAsZero) {
  QueueWaitHistogram histogram;
  histogram.Observe(-0.5);
  histogram.Observe(std::nan(""));
  EXPECT_EQ(histogram.count, 2u);
  EXPECT_EQ(histogram.sum_seconds, 0.0);
  for (uint64_t bucket : histogram.bucket_counts) EXPECT_EQ(bucket, 2u);
}

TEST(QueueWaitHistogram, RendersAsObserved) {
  MetricsSnapshot snapshot;
  TenantMetrics tenant;
  tenant.name = "t";
  tenant.queue_wait.Observe(0.5);
  tenant.queue_wait.Observe(2);
  snapshot.tenants.push_back(tenant);
  const std::string text = RenderPrometheusText(snapshot);
  EXPECT_NE(text.find("curelay_tenant_queue_wait_seconds_bucket{tenant=\"t\",le=\"0.1\"} 0\n"
                      "curelay_tenant_queue_wait_seconds_bucket{tenant=\"t\",le=\"0.5\"} 1\n"
                      "curelay_tenant_queue_wait_seconds_bucket{tenant=\"t\",le=\"1\"} 1\n"
                      "curelay_tenant_queue_wait_seconds_bucket{tenant=\"t\",le=\"+Inf\"} 2\n"
                      "curelay_tenant_queue_wait_seconds_sum{tenant=\"t\"} 2.5\n"
                      "curelay_tenant_queue_wait_seconds_count{tenant=\"t\"} 2\n"),
            std::string::npos)
      << text;
}

TEST(ListenAddress, ParsesHostAndPort) {
  std::string error;
  auto address = ParseListenAddress("127.0.0.1:9400", &error);
  ASSERT_TRUE(address) << error;
  EXPECT_EQ(address->host, "127.0.0.1");
  EXPECT_EQ(address->port, 9400);
  address = ParseListenAddress("[::1]:0", &error);
  ASSERT_TRUE(address) << error;
  EXPECT_EQ(address->host, "::1");
  EXPECT_EQ(address->port, 0);
  address = ParseListenAddress("localhost:65535", &error);
  ASSERT_TRUE(address) << error;
  EXPECT_EQ(address->host, "localhost");
  EXPECT_EQ(FormatListenAddress("::1", 9400), "[::1]:9400");
  EXPECT_EQ(FormatListenAddress("0.0.0.0", 9400), "0.0.0.0:9400");
}

TEST(ListenAddress, RejectsMalformed) {
  for (const char* bad : {"", "9400", ":9400", "host:", "host:http", "host:65536", "host:-1", "host:94 00", "::1:9400",
                          "[::1]", "[::1]9400", "[]:9400"}) {
    std::string error;
    EXPECT_FALSE(ParseListenAddress(bad, &error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

// True when a TCP connection to 127.0.0.1:port is refused.
bool ConnectionRefused(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int result = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int connect_errno = errno;
  close(fd);
  return result != 0 && connect_errno == ECONNREFUSED;
}

TEST(MetricsServer, ServesMetricsOverHttp) {
  std::atomic<int> scrapes{0};
  MetricsServer server([&] {
    ++scrapes;
    return SmallSnapshot();
  });
  std::string error;
  ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
  const int port = server.port();
  ASSERT_GT(port, 0);

  httplib::Client client("127.0.0.1", port);
  const httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(metrics->body, RenderPrometheusText(SmallSnapshot()));
  EXPECT_EQ(scrapes.load(), 1);

  const httplib::Result other = client.Get("/");
  ASSERT_TRUE(other) << httplib::to_string(other.error());
  EXPECT_EQ(other->status, 404);
  const httplib::Result near_miss = client.Get("/metrics/extra");
  ASSERT_TRUE(near_miss) << httplib::to_string(near_miss.error());
  EXPECT_EQ(near_miss->status, 404);
  EXPECT_EQ(scrapes.load(), 1);  // 404s take no snapshot

  server.Stop();
  EXPECT_EQ(server.port(), 0);
  EXPECT_TRUE(ConnectionRefused(port));
  EXPECT_FALSE(client.Get("/metrics"));
  server.Stop();  // idempotent
}

TEST(MetricsServer, EachScrapeTakesAFreshSnapshot) {
  std::atomic<uint64_t> kernels{0};
  MetricsServer server([&] {
    MetricsSnapshot snapshot;
    TenantMetrics tenant;
    tenant.name = "t";
    tenant.kernels = ++kernels;
    snapshot.tenants.push_back(tenant);
    return snapshot;
  });
  std::string error;
  ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
  httplib::Client client("127.0.0.1", server.port());
  for (int scrape = 1; scrape <= 3; ++scrape) {
    const httplib::Result result = client.Get("/metrics");
    ASSERT_TRUE(result);
    EXPECT_NE(result->body.find("curelay_tenant_kernels_total{tenant=\"t\"} " + std::to_string(scrape) + "\n"),
              std::string::npos);
  }
}

TEST(MetricsServer, ThrowingSnapshotAnswers500AndKeepsServing) {
  std::atomic<bool> fail{true};
  MetricsServer server([&] {
    if (fail) throw std::runtime_error("scheduler unavailable");
    return SmallSnapshot();
  });
  std::string error;
  ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result failed = client.Get("/metrics");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, 500);
  EXPECT_FALSE(failed->has_header("EXCEPTION_WHAT"));  // no internals leak
  fail = false;
  const httplib::Result served = client.Get("/metrics");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
}

TEST(MetricsServer, ReportsAPortInUse) {
  MetricsServer first([] { return MetricsSnapshot{}; });
  std::string error;
  ASSERT_TRUE(first.Start("127.0.0.1", 0, &error)) << error;
  MetricsServer second([] { return MetricsSnapshot{}; });
  EXPECT_FALSE(second.Start("127.0.0.1", first.port(), &error));
  EXPECT_NE(error.find("127.0.0.1:" + std::to_string(first.port())), std::string::npos) << error;
  EXPECT_EQ(second.port(), 0);
  EXPECT_FALSE(first.Start("127.0.0.1", 0, &error));  // already serving
}

TEST(MetricsServer, StopRightAfterStartReturns) {
  for (int round = 0; round < 20; ++round) {
    MetricsServer server([] { return MetricsSnapshot{}; });
    std::string error;
    ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
    const int port = server.port();
    server.Stop();
    EXPECT_TRUE(ConnectionRefused(port));
  }
}

TEST(MetricsServer, DestructorStops) {
  int port = 0;
  {
    MetricsServer server([] { return MetricsSnapshot{}; });
    std::string error;
    ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
    port = server.port();
  }
  EXPECT_TRUE(ConnectionRefused(port));
}

}  // namespace
}  // namespace curelay::backend
