// Renders a MetricsSnapshot in the Prometheus text exposition format, version 0.0.4.
//
// Families, in output order (every family is always present with its # HELP and # TYPE lines, even when it has
// no samples, so a scrape describes itself):
//   curelay_tenant_gpu_seconds_total{tenant}        counter    GPU time charged to the tenant, seconds
//   curelay_tenant_active_seconds_total{tenant}     counter    time with work pending or in flight, seconds
//   curelay_tenant_memory_bytes{tenant}             gauge      device memory in use
//   curelay_tenant_memory_peak_bytes{tenant}        gauge      highest device memory in use
//   curelay_tenant_memory_quota_bytes{tenant}       gauge      memory quota; 0 = no quota
//   curelay_tenant_kernels_total{tenant}            counter    kernels launched
//   curelay_tenant_sessions{tenant}                 gauge      sessions open
//   curelay_tenant_swapped_sessions{tenant}         gauge      sessions swapped out now (memory turns)
//   curelay_tenant_swap_outs_total{tenant}          counter    swap-outs
//   curelay_tenant_swap_ins_total{tenant}           counter    swap-ins
//   curelay_tenant_swap_seconds_total{tenant}       counter    time spent swapping, seconds
//   curelay_tenant_queue_wait_seconds{tenant}       histogram  wait for the GPU: _bucket{le}, _sum, _count
//   curelay_tenant_info{tenant,priority,weight}     gauge      always 1; carries the tenant's scheduling class
//   curelay_gpu_utilization{gpu}                    gauge      0..1, share of the last second covered by work
//   curelay_gpu_busy_seconds_total{gpu}             counter    GPU time of completed work, summed, seconds
//   curelay_gpu_saturated_seconds_total{gpu}        counter    time saturated (tenants took turns), seconds
//   curelay_gpu_saturations_total{gpu}              counter    times saturation began
// Within a family, tenants and GPUs appear in snapshot order, so equal snapshots render to equal text.
#pragma once

#include <string>
#include <string_view>

#include "backend/metrics/metrics_snapshot.h"

namespace curelay::backend {

// The Content-Type a scraper expects for this format.
inline constexpr std::string_view kPrometheusTextContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string RenderPrometheusText(const MetricsSnapshot& snapshot);

// A label value as the format wants it between double quotes: `\`, `"` and newline escaped.
std::string EscapePrometheusLabelValue(std::string_view value);

// A sample value or `le` bound: "+Inf", "-Inf", "NaN", or the shortest text that reads back as the same double.
std::string FormatPrometheusDouble(double value);

}  // namespace curelay::backend
