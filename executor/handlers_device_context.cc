// Devices and contexts: what the client caches (device properties) and context lifetime.
#include <cstring>

#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {

Session::Outcome Session::DeviceQuery(const wire::DeviceQuery& call) {
  Outcome outcome;
  CUdevice device = 0;
  outcome.result = driver_.cuDeviceGet(&device, call.device());
  if (outcome.result != CUDA_SUCCESS) return outcome;
  char name[256] = {};
  CUuuid uuid{};
  size_t total = 0;
  if ((outcome.result = driver_.cuDeviceGetName(name, sizeof(name), device)) != CUDA_SUCCESS ||
      (outcome.result = driver_.cuDeviceGetUuid(&uuid, device)) != CUDA_SUCCESS ||
      (outcome.result = driver_.cuDeviceTotalMem(&total, device)) != CUDA_SUCCESS) {
    return outcome;
  }
  // cuDeviceTotalMem reports the tenant's quota, as on a GPU that size (the client learns it once, at cuInit).
  if (const uint64_t quota = memory_quota_.quota(); quota != 0 && quota < total) total = quota;
  // Every attribute once, so the client answers cuDeviceGetAttribute locally from then on.
  std::vector<int32_t> values(CU_DEVICE_ATTRIBUTE_MAX, 0), results(CU_DEVICE_ATTRIBUTE_MAX, 0);
  for (int attribute = 1; attribute < CU_DEVICE_ATTRIBUTE_MAX; ++attribute) {
    int value = 0;
    results[attribute] =
        driver_.cuDeviceGetAttribute(&value, static_cast<CUdevice_attribute>(attribute), device);
    values[attribute] = value;
  }
  results[0] = CUDA_ERROR_INVALID_VALUE;
  const auto uuid_bytes = builder_.CreateVector(reinterpret_cast<const uint8_t*>(uuid.bytes), sizeof(uuid.bytes));
  outcome.body = wire::CreateDeviceInfo(builder_, builder_.CreateString(name), uuid_bytes, total,
                                        builder_.CreateVector(values), builder_.CreateVector(results))
                     .Union();
  outcome.body_type = wire::ReplyBody::DeviceInfo;
  return outcome;
}

Session::Outcome Session::ContextCreate(const wire::ContextCreate& call) {
  Outcome outcome;
  if (contexts_.count(call.context()) != 0 || call.context() == 0) return {CUDA_ERROR_INVALID_VALUE};
  CUcontext context = nullptr;
  std::vector<CUexecAffinityParam> affinity;
  if (call.affinity_sm_counts() != nullptr) {
    if (call.affinity_sm_counts()->size() > wire::kMostAffinityParams) return {CUDA_ERROR_INVALID_VALUE};
    for (const uint32_t sm_count : *call.affinity_sm_counts()) {
      CUexecAffinityParam param{};
      param.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
      param.param.smCount.val = sm_count;
      affinity.push_back(param);
    }
  }
  CUctxCreateParams params{};
  params.execAffinityParams = affinity.data();
  params.numExecAffinityParams = static_cast<int>(affinity.size());
  outcome.result = driver_.cuCtxCreate(&context, affinity.empty() ? nullptr : &params, call.flags(), call.device());
  if (outcome.result == CUDA_SUCCESS) {
    contexts_[call.context()] = context;
    created_contexts_.insert(call.context());
    current_context_ = call.context();  // cuCtxCreate makes the new context current on this thread
  }
  return outcome;
}

Session::Outcome Session::ContextDestroy(const wire::ContextDestroy& call) {
  if (created_contexts_.count(call.context()) == 0) return {CUDA_ERROR_INVALID_CONTEXT};
  const CUresult result =
      DestroyContext(call.context(), [&](CUcontext context) { return driver_.cuCtxDestroy(context); }, true);
  if (result == CUDA_SUCCESS) created_contexts_.erase(call.context());
  return {result};
}

std::vector<CUstream> Session::ContextStreams(uint64_t context) const {
  std::vector<CUstream> streams;
  for (const auto& [id, stream] : streams_) {
    const auto owner = stream_contexts_.find(id);
    if (owner != stream_contexts_.end() && owner->second == context) streams.push_back(stream);
  }
  if (const auto per_thread = per_thread_streams_.find(context); per_thread != per_thread_streams_.end()) {
    for (const auto& [thread, stream] : per_thread->second) streams.push_back(stream);
  }
  return streams;
}

CUresult Session::DestroyContext(uint64_t id, const std::function<CUresult(CUcontext)>& destroy,
                                 bool waits_and_frees) {
  const CUcontext context = contexts_.at(id);
  if (!waits_and_frees) {
    // Nothing below may be let go while the context's work could still read it (retained payloads, receive
    // buffers), so wait for it here; and its streams and markers are destroyed, as the context's end would.
    current_context_ = kUnknownContext;  // made current here; re-set on next use
    if (driver_.cuCtxSetCurrent(context) == CUDA_SUCCESS) driver_.cuCtxSynchronize();  // a fault ends it too
    for (const auto& [thread, stream] : per_thread_streams_[id]) {
      driver_.cuStreamDestroy(stream);
      copy_deliveries_.StreamGone(stream);  // a later stream may get the same handle
    }
    per_thread_streams_.erase(id);
    markers_.Release(context);
  }
  const CUresult result = EndContext(context, waits_and_frees, [&] { return destroy(context); });
  if (result == CUDA_SUCCESS) {
    contexts_.erase(id);
    per_thread_streams_.erase(id);
    current_context_ = kUnknownContext;  // the driver popped it if it was current; re-set on next use
  }
  return result;
}

CUresult Session::EndContext(CUcontext context, bool driver_frees, const std::function<CUresult()>& end) {
  dispatch_gate_.ForgetContext(context, driver_frees);  // its timing markers go with it
  markers_.Forget(context);
  completion_words_.Forget(context);
  copy_deliveries_.ContextGone(context);
  managed_globals_.ForgetContext(context);
  std::vector<RetainedPayload> retained = TakeRetainedPayloads(context);
  const CUresult result = end();
  if (result == CUDA_SUCCESS && driver_frees) {
    ForgetMipmappedArrays(context);
    ForgetModulesOf(context);
    texture_references_.ForgetContext(context);
  }
  SettleRetainedPayloads(context, retained, result == CUDA_SUCCESS);
  return result;
}

Session::Outcome Session::ContextQuery(const wire::ContextQuery& call) {
  const auto queried = contexts_.find(call.context());
  if (queried == contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
  Outcome outcome;
  unsigned int api_version = 0, flags = 0;
  int least = 0, greatest = 0;
  if ((outcome.result = driver_.cuCtxGetApiVersion(queried->second, &api_version)) != CUDA_SUCCESS ||
      (outcome.result = driver_.cuCtxGetFlags(&flags)) != CUDA_SUCCESS ||
      (outcome.result = driver_.cuCtxGetStreamPriorityRange(&least, &greatest)) != CUDA_SUCCESS) {
    return outcome;
  }
  outcome.body = wire::CreateContextInfo(builder_, api_version, flags, least, greatest).Union();
  outcome.body_type = wire::ReplyBody::ContextInfo;
  return outcome;
}

Session::Outcome Session::ProfilerControl(const wire::ProfilerControl& call) {
  const auto control = call.start() ? driver_.cuProfilerStart : driver_.cuProfilerStop;
  if (control == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  return {control()};
}

Session::Outcome Session::ContextResetPersistingL2Cache(const wire::ContextResetPersistingL2Cache& /*call*/) {
  if (driver_.cuCtxResetPersistingL2Cache == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  return {driver_.cuCtxResetPersistingL2Cache()};
}

Session::Outcome Session::ContextSynchronize(const wire::ContextSynchronize& /*call*/) {
  // The context's streams: the legacy stream, its created streams and its per-thread streams. Together they hold
  // all of the context's work, which is what cuCtxSynchronize waits for.
  std::vector<CUstream> streams = ContextStreams(current_context_);
  streams.push_back(nullptr);
  // All idle already (an idle synchronize): answer now, no markers needed.
  bool idle = true;
  for (CUstream stream : streams) {
    const CUresult state = driver_.cuStreamQuery(stream);
    if (state == CUDA_ERROR_NOT_READY) {
      idle = false;
      break;
    }
    if (state != CUDA_SUCCESS) return {TakeDeferred(state)};
  }
  if (idle) {
    Outcome outcome(TakeDeferred(CUDA_SUCCESS));
    outcome.synchronized = true;
    return outcome;
  }
  std::vector<CUevent> markers;
  CUresult result = CUDA_SUCCESS;
  for (CUstream stream : streams) {
    if (result != CUDA_SUCCESS) break;
    result = RecordMarker(stream, markers);
  }
  if (result != CUDA_SUCCESS) {
    ReturnMarkers(markers);
    return {TakeDeferred(result)};
  }
  return Defer(std::move(markers), 0);
}

Session::Outcome Session::PrimaryContextRetain(const wire::PrimaryContextRetain& call) {
  CUcontext context = nullptr;
  Outcome outcome;
  outcome.result = driver_.cuDevicePrimaryCtxRetain(&context, call.device());
  if (outcome.result == CUDA_SUCCESS) {
    contexts_[call.context()] = context;
    ++primary_retains_[call.device()];
    // The session keeps one retain of its own until it ends. Runtimes release the primary context at exit while
    // their streams, events and modules still exist; if that final release destroyed the real context, those
    // handles would dangle here and the session's cleanup would destroy them a second time.
    CUcontext pinned = nullptr;
    if (pinned_primary_devices_.count(call.device()) == 0 &&
        driver_.cuDevicePrimaryCtxRetain(&pinned, call.device()) == CUDA_SUCCESS) {
      pinned_primary_devices_.insert(call.device());
    }
  }
  return outcome;
}

Session::Outcome Session::PrimaryContextRelease(const wire::PrimaryContextRelease& call) {
  auto found = primary_retains_.find(call.device());
  if (found == primary_retains_.end() || found->second == 0) return {CUDA_ERROR_INVALID_CONTEXT};
  Outcome outcome;
  outcome.result = driver_.cuDevicePrimaryCtxRelease(call.device());
  if (outcome.result == CUDA_SUCCESS) --found->second;
  return outcome;
}

Session::Outcome Session::PrimaryContextSetFlags(const wire::PrimaryContextSetFlags& call) {
  return {driver_.cuDevicePrimaryCtxSetFlags(call.device(), call.flags())};
}

Session::Outcome Session::PrimaryContextReset(const wire::PrimaryContextReset& call) {
  // The reset destroys the primary context's resources, the scheduler's timing markers among them.
  const auto reset = [&] { return driver_.cuDevicePrimaryCtxReset(call.device()); };
  CUcontext primary = nullptr;
  if (driver_.cuDevicePrimaryCtxRetain(&primary, call.device()) != CUDA_SUCCESS) return {reset()};
  driver_.cuDevicePrimaryCtxRelease(call.device());  // the retain only named it
  return {EndContext(primary, true, reset)};
}

Session::Outcome Session::ContextLimit(const wire::ContextLimit& call) {
  if (driver_.cuCtxGetLimit == nullptr || driver_.cuCtxSetLimit == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUlimit limit = CU_LIMIT_STACK_SIZE;
  if (!WireEnum(call.limit(), CU_LIMIT_MAX, &limit)) return {CUDA_ERROR_INVALID_VALUE};
  size_t value = static_cast<size_t>(call.value());
  const CUresult result = call.set() ? driver_.cuCtxSetLimit(limit, value) : driver_.cuCtxGetLimit(&value, limit);
  return WithInteger({result}, static_cast<int64_t>(value));
}

Session::Outcome Session::ContextSetting(const wire::ContextSetting& call) {
  Outcome outcome;
  unsigned int value = call.value();
  switch (call.kind()) {
    case wire::ContextSettingKind::CacheConfig: {
      if (driver_.cuCtxGetCacheConfig == nullptr || driver_.cuCtxSetCacheConfig == nullptr) break;
      CUfunc_cache config = CU_FUNC_CACHE_PREFER_NONE;
      if (call.set() && !WireEnum(value, CU_FUNC_CACHE_PREFER_EQUAL, &config)) return {CUDA_ERROR_INVALID_VALUE};
      outcome.result = call.set() ? driver_.cuCtxSetCacheConfig(config) : driver_.cuCtxGetCacheConfig(&config);
      value = static_cast<unsigned int>(config);
      return WithInteger(outcome, value);
    }
    case wire::ContextSettingKind::SharedMemConfig: {
      if (driver_.cuCtxGetSharedMemConfig == nullptr || driver_.cuCtxSetSharedMemConfig == nullptr) break;
      CUsharedconfig config = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;
      if (call.set() && !WireEnum(value, CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE, &config)) {
        return {CUDA_ERROR_INVALID_VALUE};
      }
      outcome.result =
          call.set() ? driver_.cuCtxSetSharedMemConfig(config) : driver_.cuCtxGetSharedMemConfig(&config);
      value = static_cast<unsigned int>(config);
      return WithInteger(outcome, value);
    }
    case wire::ContextSettingKind::Flags:
      if (driver_.cuCtxSetFlags == nullptr || !call.set()) break;  // flags are read with ContextQuery
      outcome.result = driver_.cuCtxSetFlags(value);
      return outcome;
  }
  return {CUDA_ERROR_NOT_SUPPORTED};
}

}  // namespace curelay::executor
