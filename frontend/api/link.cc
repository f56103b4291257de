// JIT linking (cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete, cuLinkDestroy): the link state is the
// executor driver's. Inputs travel as bytes (a file is read here, on the application's side); the linked image comes
// back at cuLinkComplete and stays here until cuLinkDestroy, as the driver keeps its own.
#include <fstream>
#include <iterator>
#include <string>

#include "frontend/api/api_support.h"
#include "frontend/module/jit_options.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// The link's logs and outputs (all of it so far, each time), into the application's option arrays given at
// cuLinkCreate, against the log capacities it gave there.
void ApplyLinkLogs(CUlinkState link, const ReplyMessage& reply) {
  if (reply.reply == nullptr || link->option_count == 0) return;
  for (unsigned int i = 0; i < link->option_count; ++i) {
    if (link->options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || link->options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      link->values[i] = link->given_values[i];
    }
  }
  ApplyJitLogs(reply.reply->body_as_JitLogs(), link->option_count, link->options, link->values);
}

CUresult LookupLink(Client** client, CUlinkState link) {
  CURELAY_RETURN_IF_ERROR(RequireClient(client));
  return link != nullptr && (*client)->links.Contains(link) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult AddBytes(CUlinkState link, CUjitInputType type, std::span<const uint8_t> bytes, const char* name,
                  unsigned int option_count, CUjit_option* options, void** option_values) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LookupLink(&client, link));
  if (bytes.empty()) return CUDA_ERROR_INVALID_VALUE;
  if (bytes.size() > wire::kMaxPayloadBytes) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>> jit;
  CURELAY_RETURN_IF_ERROR(EncodeJitOptions(builder, option_count, options, option_values, &jit));
  const auto call =
      wire::CreateLinkAddData(builder, link->id, type, builder.CreateString(name != nullptr ? name : ""), jit).Union();
  ReplyMessage reply;
  const CUresult result = client->Call(builder, wire::Call::LinkAddData, call, bytes, &reply);
  ApplyLinkLogs(link, reply);
  return result;
}

}  // namespace

extern "C" {

CUresult cuLinkCreate(unsigned int option_count, CUjit_option* options, void** option_values,
                      CUlinkState* result_link) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (result_link == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>> jit;
  CURELAY_RETURN_IF_ERROR(EncodeJitOptions(builder, option_count, options, option_values, &jit));
  CUlinkState_st* link = client->links.Create(NextObjectId(), option_count, options, option_values);
  if (option_count > 0) link->given_values.assign(option_values, option_values + option_count);
  const auto call = wire::CreateLinkCreate(builder, link->id, jit).Union();
  ReplyMessage reply;
  const CUresult result = client->Call(builder, wire::Call::LinkCreate, call, {}, &reply);
  ApplyLinkLogs(link, reply);
  if (result != CUDA_SUCCESS) {
    client->links.Destroy(link);
    return result;
  }
  *result_link = link;
  return CUDA_SUCCESS;
}

CUresult cuLinkAddData(CUlinkState link, CUjitInputType type, void* data, size_t bytes, const char* name,
                       unsigned int option_count, CUjit_option* options, void** option_values) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AddBytes(link, type, {static_cast<const uint8_t*>(data), bytes}, name, option_count, options,
                  option_values);
}

CUresult cuLinkAddFile(CUlinkState link, CUjitInputType type, const char* path, unsigned int option_count,
                       CUjit_option* options, void** option_values) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (type == CU_JIT_INPUT_PTX) bytes.push_back('\0');  // PTX text needs its terminator
  return AddBytes(link, type, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, path, option_count,
                  options, option_values);
}

CUresult cuLinkComplete(CUlinkState link, void** image, size_t* bytes) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LookupLink(&client, link));
  if (image == nullptr || bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateLinkComplete(builder, link->id).Union();
  ReplyMessage reply;
  const CUresult result = client->Call(builder, wire::Call::LinkComplete, call, {}, &reply);
  ApplyLinkLogs(link, reply);
  if (result != CUDA_SUCCESS) return result;
  const auto payload = reply.message.payload.bytes();
  if (payload.empty()) return CUDA_ERROR_UNKNOWN;
  link->image.assign(payload.begin(), payload.end());
  *image = link->image.data();
  *bytes = link->image.size();
  return CUDA_SUCCESS;
}

CUresult cuLinkDestroy(CUlinkState link) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(LookupLink(&client, link));
  auto& builder = Builder();
  const auto call = wire::CreateLinkDestroy(builder, link->id).Union();
  const CUresult result = client->Call(builder, wire::Call::LinkDestroy, call, {}, nullptr);
  client->links.Destroy(link);
  return result;
}

}  // extern "C"
