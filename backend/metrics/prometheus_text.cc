#include "backend/metrics/prometheus_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

namespace curelay::backend {
namespace {

void AppendFamilyHeader(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

std::string FormatValue(uint64_t value) { return std::to_string(value); }
std::string FormatValue(double value) { return FormatPrometheusDouble(value); }

// `name{tenant="..."} value` for every tenant, in snapshot order.
template <typename Getter>
void AppendTenantFamily(std::string& out, const MetricsSnapshot& snapshot, std::string_view name,
                        std::string_view type, std::string_view help, Getter get) {
  AppendFamilyHeader(out, name, type, help);
  for (const TenantMetrics& tenant : snapshot.tenants) {
    out.append(name).append("{tenant=\"").append(EscapePrometheusLabelValue(tenant.name)).append("\"} ");
    out.append(FormatValue(get(tenant))).append("\n");
  }
}

// `name{gpu="N"} value` for every GPU, in snapshot order.
template <typename Getter>
void AppendGpuFamily(std::string& out, const MetricsSnapshot& snapshot, std::string_view name,
                     std::string_view type, std::string_view help, Getter get) {
  AppendFamilyHeader(out, name, type, help);
  for (const GpuMetrics& gpu : snapshot.gpus) {
    out.append(name).append("{gpu=\"").append(std::to_string(gpu.index)).append("\"} ");
    out.append(FormatValue(get(gpu))).append("\n");
  }
}

void AppendQueueWaitFamily(std::string& out, const MetricsSnapshot& snapshot) {
  constexpr std::string_view kName = "curelay_tenant_queue_wait_seconds";
  AppendFamilyHeader(out, kName, "histogram", "Time the tenant's work waited for the GPU, in seconds.");
  for (const TenantMetrics& tenant : snapshot.tenants) {
    const std::string label = "tenant=\"" + EscapePrometheusLabelValue(tenant.name) + "\"";
    const QueueWaitHistogram& histogram = tenant.queue_wait;
    for (size_t i = 0; i < kQueueWaitBucketCount; ++i) {
      const std::string bound =
          i < kQueueWaitBucketBounds.size() ? FormatPrometheusDouble(kQueueWaitBucketBounds[i]) : "+Inf";
      out.append(kName).append("_bucket{").append(label).append(",le=\"").append(bound).append("\"} ");
      out.append(FormatValue(histogram.bucket_counts[i])).append("\n");
    }
    out.append(kName).append("_sum{").append(label).append("} ");
    out.append(FormatValue(histogram.sum_seconds)).append("\n");
    out.append(kName).append("_count{").append(label).append("} ");
    out.append(FormatValue(histogram.count)).append("\n");
  }
}

void AppendTenantInfoFamily(std::string& out, const MetricsSnapshot& snapshot) {
  constexpr std::string_view kName = "curelay_tenant_info";
  AppendFamilyHeader(out, kName, "gauge", "Tenant scheduling class; always 1, the labels carry the information.");
  for (const TenantMetrics& tenant : snapshot.tenants) {
    out.append(kName).append("{tenant=\"").append(EscapePrometheusLabelValue(tenant.name));
    out.append("\",priority=\"").append(EscapePrometheusLabelValue(tenant.priority));
    out.append("\",weight=\"").append(std::to_string(tenant.weight)).append("\"} 1\n");
  }
}

}  // namespace

std::string EscapePrometheusLabelValue(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': escaped += "\\\\"; break;
      case '"': escaped += "\\\""; break;
      case '\n': escaped += "\\n"; break;
      default: escaped += c;
    }
  }
  return escaped;
}

std::string FormatPrometheusDouble(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // %g-style shortest round trip: 0.0001 stays "0.0001" (as Go's client libraries print bucket bounds, so `le`
  // labels match other exporters'), while huge or tiny values switch to an exponent.
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::general);
  if (result.ec != std::errc()) return "NaN";  // cannot happen with 64 bytes; never emit a malformed line
  return std::string(buffer, result.ptr);
}

std::string RenderPrometheusText(const MetricsSnapshot& snapshot) {
  std::string out;
  out.reserve(2048 + snapshot.tenants.size() * 2048 + snapshot.gpus.size() * 128);

  AppendTenantFamily(out, snapshot, "curelay_tenant_gpu_seconds_total", "counter",
                     "GPU time charged to the tenant, in seconds.",
                     [](const TenantMetrics& t) { return t.gpu_seconds; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_active_seconds_total", "counter",
                     "Time the tenant had work pending or in flight on a GPU, summed over GPUs, in seconds.",
                     [](const TenantMetrics& t) { return t.active_seconds; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_memory_bytes", "gauge",
                     "Device memory the tenant's sessions hold, in bytes.",
                     [](const TenantMetrics& t) { return t.memory_bytes; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_memory_peak_bytes", "gauge",
                     "Highest device memory the tenant's sessions held, in bytes.",
                     [](const TenantMetrics& t) { return t.memory_peak_bytes; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_memory_quota_bytes", "gauge",
                     "The tenant's device memory quota, in bytes; 0 means no quota.",
                     [](const TenantMetrics& t) { return t.quota_bytes; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_kernels_total", "counter",
                     "Kernels the tenant launched.", [](const TenantMetrics& t) { return t.kernels; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_sessions", "gauge", "Sessions the tenant has open.",
                     [](const TenantMetrics& t) { return t.sessions; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_swapped_sessions", "gauge",
                     "The tenant's sessions swapped out of their GPU now (memory turns).",
                     [](const TenantMetrics& t) { return t.swapped_sessions; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_swap_outs_total", "counter",
                     "Times the tenant's sessions were swapped out.", [](const TenantMetrics& t) { return t.swap_outs; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_swap_ins_total", "counter",
                     "Times the tenant's sessions were swapped back in.",
                     [](const TenantMetrics& t) { return t.swap_ins; });
  AppendTenantFamily(out, snapshot, "curelay_tenant_swap_seconds_total", "counter",
                     "Time the tenant's sessions spent swapping out and in, in seconds.",
                     [](const TenantMetrics& t) { return t.swap_seconds; });
  AppendQueueWaitFamily(out, snapshot);
  AppendTenantInfoFamily(out, snapshot);
  AppendGpuFamily(out, snapshot, "curelay_gpu_utilization", "gauge",
                  "Fraction of the last second the GPU ran scheduled work (overlapping pieces once), 0 to 1.",
                  [](const GpuMetrics& g) { return g.utilization; });
  AppendGpuFamily(out, snapshot, "curelay_gpu_busy_seconds_total", "counter",
                  "GPU time of the scheduled work completed on the GPU, summed over pieces, in seconds.",
                  [](const GpuMetrics& g) { return g.busy_seconds; });
  AppendGpuFamily(out, snapshot, "curelay_gpu_saturated_seconds_total", "counter",
                  "Time the scheduler found the GPU saturated (tenants took turns), in seconds.",
                  [](const GpuMetrics& g) { return g.saturated_seconds; });
  AppendGpuFamily(out, snapshot, "curelay_gpu_saturations_total", "counter",
                  "Times the GPU became saturated (turns began).",
                  [](const GpuMetrics& g) { return g.saturations; });
  return out;
}

}  // namespace curelay::backend
