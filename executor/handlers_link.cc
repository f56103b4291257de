// JIT linking: the link state is the executor driver's; the client sends inputs as bytes and gets the linked image
// back at cuLinkComplete, which it keeps until cuLinkDestroy, as the driver keeps its own.
#include "executor/aligned_copy.h"
#include "executor/session.h"
#include "schema/wire_enum.h"

namespace curelay::executor {

Session::Outcome Session::LinkCreate(const wire::LinkCreate& call) {
  if (driver_.cuLinkCreate == nullptr || driver_.cuLinkDestroy == nullptr) return {CUDA_ERROR_NOT_SUPPORTED};
  if (call.link_id() == 0 || links_.count(call.link_id()) != 0) return {CUDA_ERROR_INVALID_VALUE};
  Link link;
  link.jit = std::make_unique<JitOptionSet>(call.jit_options());
  if (!link.jit->valid()) return {CUDA_ERROR_INVALID_VALUE};
  Outcome outcome;
  outcome.result = driver_.cuLinkCreate(link.jit->count(), link.jit->options(), link.jit->values(), &link.state);
  outcome.body = link.jit->Logs(builder_).Union();
  outcome.body_type = wire::ReplyBody::JitLogs;
  if (outcome.result == CUDA_SUCCESS) links_.emplace(call.link_id(), std::move(link));
  return outcome;
}

Session::Outcome Session::LinkAddData(const wire::LinkAddData& call, std::span<const uint8_t> payload) {
  auto found = links_.find(call.link_id());
  if (found == links_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  if (payload.empty()) return {CUDA_ERROR_INVALID_VALUE};
  CUjitInputType input_type = CU_JIT_INPUT_CUBIN;
  if (!WireEnum(call.input_type(), CU_JIT_NUM_INPUT_TYPES, &input_type)) return {CUDA_ERROR_INVALID_VALUE};
  JitOptionSet input_options(call.jit_options());
  if (!input_options.valid()) return {CUDA_ERROR_INVALID_VALUE};
  const std::string name = call.name() != nullptr ? call.name()->str() : std::string();
  Outcome outcome;
  outcome.result = driver_.cuLinkAddData(found->second.state, input_type,
                                         const_cast<void*>(Aligned(payload, aligned_buffer_)), payload.size(),
                                         name.c_str(), input_options.count(), input_options.options(),
                                         input_options.values());
  outcome.body = found->second.jit->Logs(builder_).Union();
  outcome.body_type = wire::ReplyBody::JitLogs;
  return outcome;
}

Session::Outcome Session::LinkComplete(const wire::LinkComplete& call) {
  auto found = links_.find(call.link_id());
  if (found == links_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  void* image = nullptr;
  size_t bytes = 0;
  Outcome outcome;
  outcome.result = driver_.cuLinkComplete(found->second.state, &image, &bytes);
  outcome.body = found->second.jit->Logs(builder_).Union();
  outcome.body_type = wire::ReplyBody::JitLogs;
  // The image belongs to the link state, which lives until LinkDestroy: it can go out as the reply's payload.
  if (outcome.result == CUDA_SUCCESS) outcome.payload = {static_cast<const uint8_t*>(image), bytes};
  return outcome;
}

Session::Outcome Session::LinkDestroy(const wire::LinkDestroy& call) {
  auto found = links_.find(call.link_id());
  if (found == links_.end()) return {CUDA_ERROR_INVALID_HANDLE};
  const CUresult result = driver_.cuLinkDestroy(found->second.state);
  links_.erase(found);
  return {result};
}

}  // namespace curelay::executor
