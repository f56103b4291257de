// GPU coredump settings (cuCoredumpGet/SetAttribute and their Global forms): a coredump is written by the driver
// that runs the GPU work, the executor's, so the settings go there and its answers come back. A path setting
// (CU_COREDUMP_FILE, CU_COREDUMP_PIPE) names a file or pipe on the GPU host, not on the application's; the
// "Global" settings are those of the session's executor process, which serves only this session.
#include <algorithm>
#include <cstring>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult CoredumpAttribute(CUcoredumpSettings attribute, void* value, size_t* size, bool global, bool set) {
  Client* client;
  uint64_t context = 0;
  if (global) {
    CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  } else {
    CURELAY_RETURN_IF_ERROR(RequireContext(&client));
    context = CurrentContext()->id;
  }
  const uint64_t buffer_bytes = size != nullptr ? *size : 0;
  if (buffer_bytes > wire::kMaxCoredumpBufferBytes) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  // The bytes of a set travel (at most kMaxQueryBytes: a path is at most 1024); a get sends an empty buffer.
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> bytes = 0;
  if (value != nullptr) {
    const size_t sent = set ? std::min<uint64_t>(buffer_bytes, wire::kMaxQueryBytes) : 0;
    bytes = builder.CreateVector(static_cast<const uint8_t*>(value), sent);
  }
  const auto call =
      wire::CreateCoredumpAttribute(builder, attribute, global, set, bytes, buffer_bytes, size != nullptr, context)
          .Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::CoredumpAttribute, call, {}, &reply));
  const auto* answer = reply.reply->body_as_QueryAnswer();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  if (!set && value != nullptr && answer->bytes() != nullptr) {
    std::memcpy(value, answer->bytes()->data(), std::min<size_t>(answer->bytes()->size(), buffer_bytes));
  }
  if (size != nullptr) *size = static_cast<size_t>(answer->value());
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuCoredumpGetAttribute(CUcoredumpSettings attrib, void* value, size_t* size) {
  return CoredumpAttribute(attrib, value, size, false, false);
}
CUresult cuCoredumpGetAttributeGlobal(CUcoredumpSettings attrib, void* value, size_t* size) {
  return CoredumpAttribute(attrib, value, size, true, false);
}
CUresult cuCoredumpSetAttribute(CUcoredumpSettings attrib, void* value, size_t* size) {
  return CoredumpAttribute(attrib, value, size, false, true);
}
CUresult cuCoredumpSetAttributeGlobal(CUcoredumpSettings attrib, void* value, size_t* size) {
  return CoredumpAttribute(attrib, value, size, true, true);
}

}  // extern "C"
