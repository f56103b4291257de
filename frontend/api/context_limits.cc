// Context limits and settings (cache and shared-memory configuration, flags), and the CUDA 12.x "_v2" context entry
// points that name their context explicitly.
#include "frontend/api/api_support.h"
#include "frontend/client/log.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult ExchangeLimit(CUlimit limit, uint64_t value, bool set, uint64_t* answer) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (set) client->ConfigurationChanged();
  auto& builder = Builder();
  const auto call = wire::CreateContextLimit(builder, limit, value, set).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ContextLimit, call, {}, &reply));
  const auto* integer = reply.reply->body_as_IntegerValue();
  if (integer == nullptr) return CUDA_ERROR_UNKNOWN;
  if (answer != nullptr) *answer = static_cast<uint64_t>(integer->value());
  return CUDA_SUCCESS;
}

CUresult ExchangeSetting(wire::ContextSettingKind kind, uint32_t value, bool set, uint32_t* answer) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (set) client->ConfigurationChanged();
  auto& builder = Builder();
  const auto call = wire::CreateContextSetting(builder, kind, value, set).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ContextSetting, call, {}, &reply));
  if (answer == nullptr) return CUDA_SUCCESS;
  const auto* integer = reply.reply->body_as_IntegerValue();
  if (integer == nullptr) return CUDA_ERROR_UNKNOWN;
  *answer = static_cast<uint32_t>(integer->value());
  return CUDA_SUCCESS;
}

// Runs `call` with `context` current on this thread (null: the current context, as the driver reads it).
template <typename Call>
CUresult WithContext(CUcontext context, Call call) {
  if (context == nullptr || context == CurrentContext()) return call();
  CURELAY_RETURN_IF_ERROR(cuCtxPushCurrent(context));
  const CUresult result = call();
  CUcontext popped = nullptr;
  cuCtxPopCurrent(&popped);
  return result;
}

}  // namespace

extern "C" {

// Limits change only through cuCtxSetLimit (which advances the configuration epoch), except the stack size, so
// a value read once is answered here until then (libraries read limits before launches).
CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Client* client = Client::Get();
  const CUcontext context = CurrentContext();
  const bool kept = client != nullptr && context != nullptr && limit != CU_LIMIT_STACK_SIZE;
  const uint64_t epoch = client != nullptr ? client->configuration_epoch() : 0;
  if (kept) {
    std::lock_guard<std::mutex> lock(context->limits_mutex);
    if (auto found = context->limits.find(limit); found != context->limits.end() && found->second.first == epoch) {
      *value = static_cast<size_t>(found->second.second);
      return CUDA_SUCCESS;
    }
  }
  uint64_t answer = 0;
  CURELAY_RETURN_IF_ERROR(ExchangeLimit(limit, 0, false, &answer));
  Log().trace("cuCtxGetLimit({}) = {}", static_cast<int>(limit), answer);
  if (kept) {
    std::lock_guard<std::mutex> lock(context->limits_mutex);
    context->limits[limit] = {epoch, answer};
  }
  *value = static_cast<size_t>(answer);
  return CUDA_SUCCESS;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  Log().trace("cuCtxSetLimit({}, {})", static_cast<int>(limit), value);
  return ExchangeLimit(limit, value, true, nullptr);
}

CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint32_t answer = 0;
  CURELAY_RETURN_IF_ERROR(ExchangeSetting(wire::ContextSettingKind::CacheConfig, 0, false, &answer));
  return AnswerEnum(answer, CU_FUNC_CACHE_PREFER_EQUAL, config);
}

CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  return ExchangeSetting(wire::ContextSettingKind::CacheConfig, static_cast<uint32_t>(config), true, nullptr);
}

CUresult cuCtxGetSharedMemConfig(CUsharedconfig* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint32_t answer = 0;
  CURELAY_RETURN_IF_ERROR(ExchangeSetting(wire::ContextSettingKind::SharedMemConfig, 0, false, &answer));
  return AnswerEnum(answer, CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE, config);
}

CUresult cuCtxSetSharedMemConfig(CUsharedconfig config) {
  return ExchangeSetting(wire::ContextSettingKind::SharedMemConfig, static_cast<uint32_t>(config), true, nullptr);
}

CUresult cuCtxSetFlags(unsigned int flags) {
  return ExchangeSetting(wire::ContextSettingKind::Flags, flags, true, nullptr);
}

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext context) {
  if (context == nullptr) return cuCtxGetDevice(device);
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (!client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = context->device;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize_v2(CUcontext context) {
  if (context != nullptr) {
    Client* client;
    CURELAY_RETURN_IF_ERROR(RequireClient(&client));
    if (!client->contexts.Contains(context)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  return WithContext(context, [] { return cuCtxSynchronize(); });
}

}  // extern "C"
