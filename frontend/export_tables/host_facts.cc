// curelay's own table (common/gpu_facts.h): the GPU host's NVML facts about a device, for curelay's NVML shim. One
// round trip per question; the NVML shim keeps the answer briefly, so a monitoring agent's burst of NVML calls
// costs one.
#include <algorithm>
#include <cstring>

#include "common/gpu_facts.h"
#include "frontend/api/api_support.h"
#include "frontend/export_tables/table_support.h"

namespace curelay::frontend {
namespace {

void CopyText(const flatbuffers::String* text, char* out, size_t capacity) {
  const size_t length = text == nullptr ? 0 : std::min<size_t>(text->size(), capacity - 1);
  if (length > 0) std::memcpy(out, text->data(), length);
  out[length] = '\0';
}

CUresult QueryGpuFacts(CUdevice device, GpuFacts* facts) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (facts == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  auto& builder = Builder();
  const auto call = wire::CreateDeviceFacts(builder, device).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::DeviceFacts, call, {}, &reply));
  const auto* answer = reply.reply->body_as_GpuFactList();
  if (answer == nullptr || answer->results() == nullptr || answer->values() == nullptr ||
      answer->results()->size() != answer->values()->size()) {
    return CUDA_ERROR_UNKNOWN;
  }
  // Lists of another length than this release's (a malformed answer; Attach requires one protocol version) leave
  // the facts they lack unanswered.
  const size_t known = std::min<size_t>(answer->results()->size(), kGpuFactCount);
  for (size_t i = 0; i < static_cast<size_t>(kGpuFactCount); ++i) {
    facts->results[i] = i < known ? answer->results()->Get(i) : kNvmlNotSupported;
    facts->values[i] = i < known ? answer->values()->Get(i) : 0;
  }
  CopyText(answer->driver_version(), facts->driver_version, sizeof facts->driver_version);
  CopyText(answer->nvml_version(), facts->nvml_version, sizeof facts->nvml_version);
  CopyText(answer->vbios_version(), facts->vbios_version, sizeof facts->vbios_version);
  // Masks longer than the facts carry are cut (CPUs past the 1024th are not told); shorter ones end in zeros.
  auto copy_mask = [](const flatbuffers::Vector<uint64_t>* mask, uint64_t* out, size_t words) {
    for (size_t i = 0; i < words; ++i) out[i] = mask != nullptr && i < mask->size() ? mask->Get(i) : 0;
  };
  copy_mask(answer->cpu_affinity(), facts->cpu_affinity, kCpuAffinityWords);
  copy_mask(answer->memory_affinity(), facts->memory_affinity, kMemoryAffinityWords);
  // Affinity names the GPU host's CPUs and NUMA nodes: on another machine no CPU of this one is nearer the GPU, and
  // a program that pins its threads by the mask (sched_setaffinity) would pin them wrongly. Refused there.
  if (client->remote()) {
    for (const wire::GpuFact local : {wire::GpuFact::CpuAffinity, wire::GpuFact::MemoryAffinity, wire::GpuFact::NumaNode}) {
      facts->results[static_cast<size_t>(local)] = kNvmlNotSupported;
      facts->values[static_cast<size_t>(local)] = 0;
    }
  }
  return CUDA_SUCCESS;
}

CUresult QueryGpuActivity(CUdevice device, GpuActivity* activity, GpuProcessEntry* processes, uint32_t capacity) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (activity == nullptr || (processes == nullptr && capacity != 0)) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  auto& builder = Builder();
  const auto call = wire::CreateDeviceActivity(builder, device).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::DeviceActivity, call, {}, &reply));
  const auto* answer = reply.reply->body_as_GpuActivity();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  activity->utilization_result = answer->utilization_result();
  activity->gpu_percent = std::min<uint32_t>(answer->gpu_percent(), 100);
  activity->memory_percent = std::min<uint32_t>(answer->memory_percent(), 100);
  activity->processes_result = answer->processes_result();
  activity->memory_result = answer->memory_result();
  activity->memory_total = answer->memory_total();
  activity->memory_free = std::min(answer->memory_free(), answer->memory_total());
  const auto* list = answer->processes();
  activity->process_count = list == nullptr ? 0 : list->size();
  for (uint32_t i = 0; i < activity->process_count && i < capacity; ++i) {
    const wire::GpuProcess* process = list->Get(i);
    if (process == nullptr) return CUDA_ERROR_UNKNOWN;
    processes[i].pid = process->pid();
    processes[i].used_bytes = process->used_bytes();
    CopyText(process->name(), processes[i].name, sizeof processes[i].name);
  }
  return CUDA_SUCCESS;
}

}  // namespace

const void* CurelayHostFactsTable() {
  static const HostFactsTable table = {sizeof(HostFactsTable), &QueryGpuFacts, &QueryGpuActivity};
  return &table;
}

}  // namespace curelay::frontend
