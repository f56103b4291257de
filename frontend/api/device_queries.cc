// Device queries the client cannot answer from what it learned at cuInit, but whose answers never change for a
// session's devices: cuDeviceCanAccessPeer, cuDeviceGetP2PAttribute and cuDeviceGetTexture1DLinearMaxWidth. The
// executor's driver answers each question once; the answer (a refusal too) is kept, so asking again costs no
// round trip.
#include <array>
#include <map>
#include <mutex>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

enum class Question : int64_t { kCanAccessPeer, kP2PAttribute, kTexture1DLinearMaxWidth };
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

}  // extern "C"
