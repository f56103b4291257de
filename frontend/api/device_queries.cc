// Device queries the client cannot answer from what it learned at cuInit, but whose answers never change for a
// session's devices: cuDeviceCanAccessPeer, cuDeviceGetP2PAttribute, cuDeviceGetTexture1DLinearMaxWidth and
// cuDeviceGetExecAffinitySupport. The executor's driver answers each question once; the answer (a refusal too) is
// kept, so asking again costs no round trip. The other queries here are forwarded each time, their answers being the
// real driver's (CUDA_ERROR_NOT_SUPPORTED included, which is what Linux answers for the LUID and NvSciSync):
// atomic capabilities, the LUID, NvSciSync attributes, a context's execution affinity, and GPUDirect RDMA flushes.
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

enum class Question : int64_t { kCanAccessPeer, kP2PAttribute, kTexture1DLinearMaxWidth, kExecAffinitySupport };
using QuestionKey = std::array<int64_t, 4>;  // the question and its three arguments

struct Answer {
  CUresult result;
  int64_t value;
};

// Answers belong to one session: a forked child's new client starts with none (the parent's client object is
// leaked, never reused, so its address never names another session).
class AnswerCache {
 public:
  bool Find(const Client* client, const QuestionKey& key, Answer* answer) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (client != owner_) return false;
    const auto found = answers_.find(key);
    if (found == answers_.end()) return false;
    *answer = found->second;
    return true;
  }
  void Keep(const Client* client, const QuestionKey& key, const Answer& answer) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (client != owner_) {
      answers_.clear();
      owner_ = client;
    }
    answers_[key] = answer;
  }

 private:
  std::mutex mutex_;
  const Client* owner_ = nullptr;
  std::map<QuestionKey, Answer> answers_;
};

AnswerCache& Answers() {
  static auto* cache = new AnswerCache;  // never destroyed: queries may come from static destructors
  return *cache;
}

// Answers that depend on the arguments alone. Anything else (a session that broke, a driver that wanted a context
// the executor had not made yet) may change, so it is not kept.
bool Lasting(CUresult result) {
  return result == CUDA_SUCCESS || result == CUDA_ERROR_INVALID_VALUE || result == CUDA_ERROR_INVALID_DEVICE;
}

// The cached answer to `key`, or the executor's, which `build` puts into a request.
template <typename Build>
CUresult Ask(Client& client, const QuestionKey& key, Build build, int64_t* value) {
  Answer answer{};
  if (!Answers().Find(&client, key, &answer)) {
    auto& builder = Builder();
    const auto [type, call] = build(builder);
    ReplyMessage reply;
    const CUresult result = client.Call(builder, type, call, {}, &reply);
    if (reply.reply == nullptr) return result;
    const auto* integer = reply.reply->body_as_IntegerValue();
    if (result == CUDA_SUCCESS && integer == nullptr) return CUDA_ERROR_UNKNOWN;
    answer = {result, integer != nullptr ? integer->value() : 0};
    if (Lasting(result)) Answers().Keep(&client, key, answer);
  }
  if (answer.result == CUDA_SUCCESS) *value = answer.value;
  return answer.result;
}

CUresult AskPeer(CUdevice device, CUdevice peer, bool can_access, int attribute, int* value) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, peer));
  const auto question = can_access ? Question::kCanAccessPeer : Question::kP2PAttribute;
  const QuestionKey key{static_cast<int64_t>(question), device, peer, attribute};
  int64_t answer = 0;
  CURELAY_RETURN_IF_ERROR(Ask(
      *client, key,
      [&](flatbuffers::FlatBufferBuilder& builder) {
        return std::pair{wire::Call::PeerQuery,
                         wire::CreatePeerQuery(builder, device, peer, can_access, attribute).Union()};
      },
      &answer));
  *value = static_cast<int>(answer);
  return CUDA_SUCCESS;
}

// cuDeviceGetHostAtomicCapabilities, or (peer >= 0) cuDeviceGetP2PAtomicCapabilities: the bitmasks come back in
// the order asked. The driver's own checks (null arrays, a count of 0, unknown operations) answer as it answers.
CUresult AskAtomicCapabilities(unsigned int* capabilities, const CUatomicOperation* operations, unsigned int count,
                               CUdevice device, CUdevice peer, bool between_devices) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  if (between_devices) CURELAY_RETURN_IF_ERROR(RequireDevice(*client, peer));
  if (capabilities == nullptr || operations == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  // Each answer is 4 bytes of the reply, which must stay a small message.
  if (count > wire::kMaxQueryBytes / sizeof(unsigned int)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<int32_t> asked(operations, operations + count);
  auto& builder = Builder();
  const auto call =
      wire::CreateAtomicCapabilities(builder, device, peer, between_devices, builder.CreateVector(asked)).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::AtomicCapabilities, call, {}, &reply));
  const auto* answer = reply.reply->body_as_QueryAnswer();
  if (answer == nullptr || answer->bytes() == nullptr || answer->bytes()->size() != count * sizeof(unsigned int)) {
    return CUDA_ERROR_UNKNOWN;
  }
  std::memcpy(capabilities, answer->bytes()->data(), answer->bytes()->size());
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  return AskPeer(dev, peerDev, true, 0, canAccessPeer);
}

CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice srcDevice, CUdevice dstDevice) {
  return AskPeer(srcDevice, dstDevice, false, attrib, value);
}

CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t* maxWidthInElements, CUarray_format format, unsigned numChannels,
                                            CUdevice dev) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (maxWidthInElements == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, dev));
  const QuestionKey key{static_cast<int64_t>(Question::kTexture1DLinearMaxWidth), dev, format, numChannels};
  int64_t answer = 0;
  CURELAY_RETURN_IF_ERROR(Ask(
      *client, key,
      [&](flatbuffers::FlatBufferBuilder& builder) {
        return std::pair{wire::Call::Texture1DLinearMaxWidth,
                         wire::CreateTexture1DLinearMaxWidth(builder, dev, format, numChannels).Union()};
      },
      &answer));
  *maxWidthInElements = static_cast<size_t>(answer);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetExecAffinitySupport(int* pi, CUexecAffinityType type, CUdevice dev) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, dev));
  const QuestionKey key{static_cast<int64_t>(Question::kExecAffinitySupport), dev, type, 0};
  int64_t answer = 0;
  CURELAY_RETURN_IF_ERROR(Ask(
      *client, key,
      [&](flatbuffers::FlatBufferBuilder& builder) {
        return std::pair{wire::Call::ExecAffinityQuery, wire::CreateExecAffinityQuery(builder, dev, type, false).Union()};
      },
      &answer));
  *pi = static_cast<int>(answer);
  return CUDA_SUCCESS;
}

// Of the current context, as the executor's driver made it (curelay creates no context with an affinity).
CUresult cuCtxGetExecAffinity(CUexecAffinityParam* pExecAffinity, CUexecAffinityType type) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (pExecAffinity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& builder = Builder();
  const auto call = wire::CreateExecAffinityQuery(builder, 0, type, true, CurrentContext()->id).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::ExecAffinityQuery, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  pExecAffinity->type = type;
  pExecAffinity->param.smCount.val = static_cast<unsigned int>(answer->value());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetHostAtomicCapabilities(unsigned int* capabilities, const CUatomicOperation* operations,
                                           unsigned int count, CUdevice dev) {
  return AskAtomicCapabilities(capabilities, operations, count, dev, -1, false);
}

CUresult cuDeviceGetP2PAtomicCapabilities(unsigned int* capabilities, const CUatomicOperation* operations,
                                          unsigned int count, CUdevice srcDevice, CUdevice dstDevice) {
  return AskAtomicCapabilities(capabilities, operations, count, srcDevice, dstDevice, true);
}

// A LUID identifies a device to Windows graphics APIs; the driver on Linux answers CUDA_ERROR_NOT_SUPPORTED.
CUresult cuDeviceGetLuid(char* luid, unsigned int* deviceNodeMask, CUdevice dev) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (luid == nullptr || deviceNodeMask == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, dev));
  auto& builder = Builder();
  const auto call = wire::CreateDeviceGetLuid(builder, dev).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::DeviceGetLuid, call, {}, &reply));
  const auto* answer = reply.reply->body_as_QueryAnswer();
  if (answer == nullptr || answer->bytes() == nullptr || answer->bytes()->size() != 8) return CUDA_ERROR_UNKNOWN;
  std::memcpy(luid, answer->bytes()->data(), 8);
  *deviceNodeMask = static_cast<unsigned int>(answer->value());
  return CUDA_SUCCESS;
}

// An NvSciSyncAttrList is an object of this process that the executor's driver cannot be handed, so the driver is
// asked with none: where NvSciSync exists at all (Tegra), it could not fill ours; on Linux x86 it answers
// CUDA_ERROR_NOT_SUPPORTED, which is passed on. Where the application passed a list, an answer that only the
// missing list caused (CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE) becomes CUDA_ERROR_NOT_SUPPORTED.
CUresult cuDeviceGetNvSciSyncAttributes(void* nvSciSyncAttrList, CUdevice dev, int flags) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, dev));
  const bool list_given = nvSciSyncAttrList != nullptr;
  auto& builder = Builder();
  const auto call = wire::CreateNvSciSyncAttributes(builder, dev, flags, list_given).Union();
  const CUresult result = client->Call(builder, wire::Call::NvSciSyncAttributes, call, {}, nullptr);
  if (list_given && (result == CUDA_ERROR_INVALID_VALUE || result == CUDA_ERROR_INVALID_HANDLE ||
                     result == CUDA_SUCCESS)) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return result;
}

// GPUDirect RDMA writes reach the executor's GPU, so that is where they are flushed (the current context there).
CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target, CUflushGPUDirectRDMAWritesScope scope) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  auto& builder = Builder();
  const auto call = wire::CreateFlushGPUDirectRDMAWrites(builder, target, scope).Union();
  return client->Call(builder, wire::Call::FlushGPUDirectRDMAWrites, call, {}, nullptr);
}

}  // extern "C"
