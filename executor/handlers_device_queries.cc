// Device and context queries the client forwards as asked (frontend/api/device_queries.cc), GPUDirect RDMA flushes,
// the deprecated profiler initialization and coredump attributes: each answered by the real driver here.
#include <algorithm>
#include <cstring>
#include <vector>

#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {
namespace {

// The operations of one atomic capability question: the driver takes an unsigned count, and CUatomicOperation has
// a handful of values, so a longer list is only ever a malformed request.
constexpr size_t kMaxAtomicOperations = 1024;

}  // namespace

Session::Outcome Session::ExecAffinityQuery(const wire::ExecAffinityQuery& call) {
  CUexecAffinityType type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  if (!WireEnum(call.type(), CU_EXEC_AFFINITY_TYPE_MAX, &type)) return {CUDA_ERROR_INVALID_VALUE};
  Outcome outcome;
  int64_t answer = 0;
  if (call.of_context()) {
    if (driver_.cuCtxGetExecAffinity == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    if (const CUresult made_current = MakeCurrent(call.context()); made_current != CUDA_SUCCESS) return {made_current};
    CUexecAffinityParam affinity{};
    outcome.result = driver_.cuCtxGetExecAffinity(&affinity, type);
    // The only affinity type (CU_EXEC_AFFINITY_TYPE_SM_COUNT) holds one unsigned number.
    answer = affinity.param.smCount.val;
  } else {
    if (driver_.cuDeviceGetExecAffinitySupport == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
    int supported = 0;
    outcome.result = driver_.cuDeviceGetExecAffinitySupport(&supported, type, call.device());
    answer = supported;
  }
  return WithInteger(outcome, answer);
}

Session::Outcome Session::AtomicCapabilities(const wire::AtomicCapabilities& call) {
  const auto query = call.between_devices() ? driver_.cuDeviceGetP2PAtomicCapabilities != nullptr
                                            : driver_.cuDeviceGetHostAtomicCapabilities != nullptr;
  if (!query) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.operations() == nullptr || call.operations()->size() > kMaxAtomicOperations) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  std::vector<CUatomicOperation> operations;
  for (const int32_t operation : *call.operations()) {
    if (!WireEnum(operation, CU_ATOMIC_OPERATION_MAX, &operations.emplace_back())) return {CUDA_ERROR_INVALID_VALUE};
  }
  std::vector<unsigned int> capabilities(operations.size(), 0);
  // An empty list reaches the driver as the application gave it (count 0), with arrays it may not read.
  unsigned int* capability_array = capabilities.empty() ? nullptr : capabilities.data();
  const CUatomicOperation* operation_array = operations.empty() ? nullptr : operations.data();
  const auto count = static_cast<unsigned int>(operations.size());
  Outcome outcome;
  outcome.result = call.between_devices()
                       ? driver_.cuDeviceGetP2PAtomicCapabilities(capability_array, operation_array, count,
                                                                  call.device(), call.peer())
                       : driver_.cuDeviceGetHostAtomicCapabilities(capability_array, operation_array, count,
                                                                   call.device());
  const auto* bytes = reinterpret_cast<const uint8_t*>(capabilities.data());
  outcome.body =
      wire::CreateQueryAnswer(builder_, builder_.CreateVector(bytes, capabilities.size() * sizeof(unsigned int)), 0)
          .Union();
  outcome.body_type = wire::ReplyBody::QueryAnswer;
  return outcome;
}

Session::Outcome Session::DeviceGetLuid(const wire::DeviceGetLuid& call) {
  if (driver_.cuDeviceGetLuid == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  char luid[8] = {};
  unsigned int node_mask = 0;
  Outcome outcome;
  outcome.result = driver_.cuDeviceGetLuid(luid, &node_mask, call.device());
  outcome.body = wire::CreateQueryAnswer(builder_,
                                         builder_.CreateVector(reinterpret_cast<const uint8_t*>(luid), sizeof(luid)),
                                         node_mask)
                     .Union();
  outcome.body_type = wire::ReplyBody::QueryAnswer;
  return outcome;
}

// The driver is asked with a null list: an NvSciSyncAttrList is an object of the application's process. Its answer
// stands where the application passed no list either; the client maps the rest (frontend/api/device_queries.cc).
Session::Outcome Session::NvSciSyncAttributes(const wire::NvSciSyncAttributes& call) {
  if (driver_.cuDeviceGetNvSciSyncAttributes == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  return {driver_.cuDeviceGetNvSciSyncAttributes(nullptr, call.device(), call.flags())};
}

Session::Outcome Session::FlushGPUDirectRDMAWrites(const wire::FlushGPUDirectRDMAWrites& call) {
  if (driver_.cuFlushGPUDirectRDMAWrites == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUflushGPUDirectRDMAWritesTarget target = CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX;
  CUflushGPUDirectRDMAWritesScope scope = CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER;
  if (!WireEnum(call.target(), CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX, &target) ||
      !WireEnum(call.scope(), CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES, &scope)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  return {driver_.cuFlushGPUDirectRDMAWrites(target, scope)};
}

Session::Outcome Session::ProfilerInitialize(const wire::ProfilerInitialize& call) {
  if (driver_.cuProfilerInitialize == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUoutput_mode output_mode = CU_OUT_KEY_VALUE_PAIR;
  if (!WireEnum(call.output_mode(), CU_OUT_CSV, &output_mode)) return {CUDA_ERROR_INVALID_VALUE};
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  return {driver_.cuProfilerInitialize(call.config_file() != nullptr ? call.config_file()->c_str() : nullptr,
                                       call.output_file() != nullptr ? call.output_file()->c_str() : nullptr,
                                       output_mode)};
#pragma GCC diagnostic pop
}

Session::Outcome Session::CoredumpAttribute(const wire::CoredumpAttribute& call) {
  using Accessor = CUresult (*)(CUcoredumpSettings, void*, size_t*);
  const Accessor accessor = call.set() ? (call.global() ? driver_.cuCoredumpSetAttributeGlobal
                                                        : driver_.cuCoredumpSetAttribute)
                                       : (call.global() ? driver_.cuCoredumpGetAttributeGlobal
                                                        : driver_.cuCoredumpGetAttribute);
  if (accessor == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (!call.global()) {
    if (const CUresult made_current = MakeCurrent(call.context()); made_current != CUDA_SUCCESS) return {made_current};
  }
  if (call.size() > wire::kMaxCoredumpBufferBytes) return {CUDA_ERROR_INVALID_VALUE};
  if (call.value() != nullptr && call.value()->size() > std::min<uint64_t>(call.size(), wire::kMaxQueryBytes)) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  // The application's buffer as the driver sees it: a set's bytes (zeros beyond what travelled), or room for a get.
  std::vector<uint8_t> buffer(std::max<uint64_t>(call.size(), 1), 0);
  if (call.value() != nullptr && call.value()->size() != 0) {
    std::memcpy(buffer.data(), call.value()->data(), call.value()->size());
  }
  size_t size = call.size();
  void* value = call.value() != nullptr ? buffer.data() : nullptr;
  CUcoredumpSettings attribute = CU_COREDUMP_ENABLE_ON_EXCEPTION;
  if (!WireEnum(call.attribute(), CU_COREDUMP_MAX, &attribute)) return {CUDA_ERROR_INVALID_VALUE};
  Outcome outcome;
  outcome.result = accessor(attribute, value, call.size_given() ? &size : nullptr);
  const size_t returned = std::min<uint64_t>(call.size(), wire::kMaxQueryBytes);
  outcome.body = wire::CreateQueryAnswer(builder_, builder_.CreateVector(buffer.data(), call.set() ? 0 : returned),
                                         static_cast<int64_t>(size))
                     .Union();
  outcome.body_type = wire::ReplyBody::QueryAnswer;
  return outcome;
}

}  // namespace curelay::executor
