// Green contexts (cuda.h answers CUDA_ERROR_INVALID_CONTEXT for a green context that is not one): SM resources (of a device, a context, a green context), their split, descriptors, green contexts
// with the CUcontext of each, and their streams and events. Resources cross the wire as the driver's CUdevResource
// bytes, which the client sends back unchanged.
#include <algorithm>
#include <array>
#include <cstring>

#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {
namespace {

using ResourceBytes = std::array<uint8_t, sizeof(CUdevResource)>;

ResourceBytes BytesOf(const CUdevResource& resource) {
  ResourceBytes bytes;
  std::memcpy(bytes.data(), &resource, bytes.size());
  return bytes;
}

// The most resources answered that are remembered (a few per green context in practice); past it, an arbitrary one
// is let go.
constexpr size_t kMostResourcesAnswered = 65536;

}  // namespace

void Session::ResourceAnswered(const CUdevResource& resource) {
  if (resources_answered_.size() >= kMostResourcesAnswered) resources_answered_.erase(resources_answered_.begin());
  resources_answered_.insert(BytesOf(resource));
}

bool Session::ReadResources(const flatbuffers::Vector<uint8_t>* bytes, size_t count,
                            std::vector<CUdevResource>* resources) const {
  const size_t size = bytes == nullptr ? 0 : bytes->size();
  if (count > wire::kMostResourceGroups || size != count * sizeof(CUdevResource)) return false;
  resources->resize(count);
  if (size != 0) std::memcpy(resources->data(), bytes->data(), size);
  return std::all_of(resources->begin(), resources->end(),
                     [&](const CUdevResource& resource) { return resources_answered_.count(BytesOf(resource)) != 0; });
}

Session::Outcome Session::DevResourceQuery(const wire::DevResourceQuery& call) {
  CUdevResourceType type;
  if (!WireEnum(call.type(), CU_DEV_RESOURCE_TYPE_SM, &type)) return {CUDA_ERROR_INVALID_RESOURCE_TYPE};
  CUdevResource resource{};
  Outcome outcome;
  switch (call.owner()) {
    case wire::DevResourceOwner::Device:
      if (driver_.cuDeviceGetDevResource == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      outcome.result = driver_.cuDeviceGetDevResource(call.device(), &resource, type);
      break;
    case wire::DevResourceOwner::Context: {
      const auto context = contexts_.find(call.handle());
      if (context == contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
      if (driver_.cuCtxGetDevResource == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      outcome.result = driver_.cuCtxGetDevResource(context->second, &resource, type);
      break;
    }
    case wire::DevResourceOwner::GreenContext: {
      const auto green = green_contexts_.find(call.handle());
      if (green == green_contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
      if (driver_.cuGreenCtxGetDevResource == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
      outcome.result = driver_.cuGreenCtxGetDevResource(green->second.handle, &resource, type);
      break;
    }
    default:
      return {CUDA_ERROR_INVALID_VALUE};
  }
  if (outcome.result != CUDA_SUCCESS) return outcome;
  ResourceAnswered(resource);
  const auto bytes = builder_.CreateVector(reinterpret_cast<const uint8_t*>(&resource), sizeof(resource));
  outcome.body = wire::CreateQueryAnswer(builder_, bytes, 0).Union();
  outcome.body_type = wire::ReplyBody::QueryAnswer;
  return outcome;
}

Session::Outcome Session::DevSmResourceSplit(const wire::DevSmResourceSplit& call) {
  if (driver_.cuDevSmResourceSplitByCount == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  std::vector<CUdevResource> input;
  if (!ReadResources(call.input(), 1, &input)) return {CUDA_ERROR_INVALID_VALUE};
  unsigned int groups = call.groups();
  if (!call.count_only() && groups > wire::kMostResourceGroups) return {CUDA_ERROR_INVALID_VALUE};
  std::vector<CUdevResource> result(call.count_only() ? 0 : groups);
  CUdevResource remaining{};
  Outcome outcome;
  outcome.result = driver_.cuDevSmResourceSplitByCount(call.count_only() ? nullptr : result.data(), &groups,
                                                       input.data(), call.want_remaining() ? &remaining : nullptr,
                                                       call.flags(), call.min_count());
  if (outcome.result != CUDA_SUCCESS) return outcome;
  // The driver makes at most the groups asked for; never hand back more than were made room for.
  const size_t made = call.count_only() ? 0 : std::min<size_t>(groups, result.size());
  for (size_t group = 0; group < made; ++group) ResourceAnswered(result[group]);
  if (call.want_remaining()) ResourceAnswered(remaining);
  const auto result_bytes =
      builder_.CreateVector(reinterpret_cast<const uint8_t*>(result.data()), made * sizeof(CUdevResource));
  const auto remaining_bytes = builder_.CreateVector(reinterpret_cast<const uint8_t*>(&remaining),
                                                     call.want_remaining() ? sizeof(remaining) : 0);
  outcome.body = wire::CreateDevResourceSplit(builder_, groups, result_bytes, remaining_bytes).Union();
  outcome.body_type = wire::ReplyBody::DevResourceSplit;
  return outcome;
}

Session::Outcome Session::DevResourceGenerateDesc(const wire::DevResourceGenerateDesc& call) {
  if (driver_.cuDevResourceGenerateDesc == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.desc() == 0 || resource_descs_.count(call.desc()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  std::vector<CUdevResource> resources;
  if (!ReadResources(call.resources(), call.count(), &resources)) return {CUDA_ERROR_INVALID_VALUE};
  CUdevResourceDesc desc = nullptr;
  const CUresult result =
      driver_.cuDevResourceGenerateDesc(&desc, resources.empty() ? nullptr : resources.data(), call.count());
  if (result == CUDA_SUCCESS) resource_descs_[call.desc()] = desc;
  return {result};
}

Session::Outcome Session::GreenContextCreate(const wire::GreenContextCreate& call) {
  if (driver_.cuGreenCtxCreate == nullptr || driver_.cuCtxFromGreenCtx == nullptr ||
      driver_.cuGreenCtxDestroy == nullptr) {
    return {CUDA_ERROR_NOT_SUPPORTED};
  }
  if (call.green() == 0 || call.context() == 0 || green_contexts_.count(call.green()) != 0 ||
      contexts_.count(call.context()) != 0) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  const auto desc = resource_descs_.find(call.desc());
  if (desc == resource_descs_.end()) return {CUDA_ERROR_INVALID_VALUE};
  CUgreenCtx green = nullptr;
  Outcome outcome;
  outcome.result = driver_.cuGreenCtxCreate(&green, desc->second, call.device(), call.flags());
  if (outcome.result != CUDA_SUCCESS) return outcome;
  CUcontext context = nullptr;
  outcome.result = driver_.cuCtxFromGreenCtx(&context, green);
  if (outcome.result != CUDA_SUCCESS) {
    driver_.cuGreenCtxDestroy(green);
    return outcome;
  }
  green_contexts_[call.green()] = {green, call.context()};
  contexts_[call.context()] = context;
  unsigned long long id = 0;
  const CUresult id_result =
      driver_.cuGreenCtxGetId != nullptr ? driver_.cuGreenCtxGetId(green, &id) : CUDA_ERROR_NOT_SUPPORTED;
  outcome.body = wire::CreateGreenContextCreated(builder_, id_result, id).Union();
  outcome.body_type = wire::ReplyBody::GreenContextCreated;
  return outcome;
}

Session::Outcome Session::GreenContextDestroy(const wire::GreenContextDestroy& call) {
  const auto found = green_contexts_.find(call.green());
  if (found == green_contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
  const GreenContext green = found->second;
  // cuGreenCtxDestroy neither waits for the green context's work nor frees what was made in it (measured on the
  // H200: a kernel still ran, an event recorded after it still pended, a module still worked).
  const CUresult result =
      DestroyContext(green.context, [&](CUcontext) { return driver_.cuGreenCtxDestroy(green.handle); }, false);
  if (result == CUDA_SUCCESS) green_contexts_.erase(call.green());
  return {result};
}

Session::Outcome Session::GreenContextEvent(const wire::GreenContextEvent& call) {
  const auto green = green_contexts_.find(call.green());
  if (green == green_contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
  const auto event = events_.find(call.event());
  if (event == events_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  const auto driver_call = call.wait() ? driver_.cuGreenCtxWaitEvent : driver_.cuGreenCtxRecordEvent;
  if (driver_call == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  const CUresult result = driver_call(green->second.handle, event->second);
  const CUcontext context = contexts_.at(green->second.context);
  // What the event completes after, or waits for: every stream of the green context.
  const std::vector<CUstream> streams = ContextStreams(green->second.context);
  if (result == CUDA_SUCCESS && call.wait()) {
    copy_deliveries_.ContextWaited(call.event(), context, streams);
  } else if (result == CUDA_SUCCESS) {
    copy_deliveries_.ContextEventRecorded(call.event(), context, streams);
  }
  return {result};
}

Session::Outcome Session::GreenContextStreamCreate(const wire::GreenContextStreamCreate& call) {
  if (call.stream() == 0 || (call.stream() & wire::kPerThreadStreamBit) || streams_.count(call.stream())) {
    return {CUDA_ERROR_INVALID_VALUE};
  }
  const auto green = green_contexts_.find(call.green());
  if (green == green_contexts_.end()) return {CUDA_ERROR_INVALID_CONTEXT};
  if (driver_.cuGreenCtxStreamCreate == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  CUstream stream = nullptr;
  const CUresult result =
      driver_.cuGreenCtxStreamCreate(&stream, green->second.handle, call.flags(), call.priority());
  if (result == CUDA_SUCCESS) {
    streams_[call.stream()] = stream;
    stream_contexts_[call.stream()] = green->second.context;
  }
  return {result};
}

}  // namespace curelay::executor
