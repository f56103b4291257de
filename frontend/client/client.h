// The shim's per-process state: the session with the backend, what it has learned about the devices, the live
// handles, and each thread's context stack. Created by cuInit; replaced (not reused) in a forked child.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontend/client/copy_staging.h"
#include "frontend/client/handle_registry.h"
#include "frontend/client/host_allocations.h"
#include "frontend/client/handles.h"
#include "frontend/client/host_mirrors.h"
#include "schema/wire.h"
#include "transport/channel.h"

namespace curelay::frontend {

struct DeviceInfo {
  std::string name;
  CUuuid uuid{};
  size_t total_memory = 0;
  std::vector<int32_t> attributes;
  std::vector<int32_t> attribute_results;
};

struct PrimaryContext {
  CUctx_st* context = nullptr;
  int retains = 0;
  unsigned int flags = 0;
};

// A reply kept together with the frames it points into.
struct ReplyMessage {
  transport::IncomingMessage message;
  const wire::Reply* reply = nullptr;
};

class Client {
  // A caller waiting for the reply with a given sequence number.
  // A message of the executor driver's log (Reply.driver_log), on its way to the application's (client/driver_log.h).
  struct DriverLogMessage {
    CUlogLevel level;
    std::string text;
  };
  struct Waiter {
    ReplyMessage* reply = nullptr;
    std::vector<DriverLogMessage> driver_log;  // raised by this call, for its thread
    CUresult result = CUDA_SUCCESS;
    bool done = false;
    // A delivery (see PostDelivery): the reply's payload lands at `destination`, by whichever thread reads it.
    uint8_t* destination = nullptr;
    uint64_t bytes = 0;
    bool placed = false;  // the channel will have its payload at `destination` when its reply is taken
  };

 public:
  // The process's client, or nullptr before a successful cuInit (or in a forked child before its own cuInit).
  static Client* Get();
  // Connects and performs the handshake. Idempotent: later calls return the first outcome.
  static CUresult Initialize();
  // For the reply fuzzer (fuzz/client_reply_fuzzer.cc), which plays the executor: what Initialize does after the
  // handshake with the backend (Attach with `session_key`, learn the devices), over a channel already connected.
  // The session counts as remote (no shared directory). Fails if a session exists.
  static CUresult InitializeOver(std::unique_ptr<transport::Channel> channel, std::span<const uint8_t> session_key);
  // Ends the process's session and frees its client and the handles it made (a forked child's start without the
  // leak): the next cuInit starts over. The graph and capture registries of frontend/api/ stay as they are.
  static void Forget();

  // A call the caller waits for. `reply` may be null when only the result matters.
  CUresult Call(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                std::span<const uint8_t> payload, ReplyMessage* reply);
  // A call nobody waits for: its failure surfaces at the next synchronizing call.
  CUresult Post(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                std::span<const uint8_t> payload);

  // A device-to-host chunk nobody waits for: when its reply arrives, its `bytes` land at `destination` (before any
  // later reply is looked at, so a synchronizing call that returns after it sees the data). A failure is kept and
  // returned by the next synchronizing call (TakeAsyncError).
  CUresult PostDelivery(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                        uint8_t* destination, uint64_t bytes);
  // Waits until every delivery posted so far has landed (memory is about to be freed, or a copy must be complete).
  CUresult AwaitDeliveries();
  // Whether any delivery (PostDelivery) is still on its way; whether one into [start, start + bytes) is, to be
  // copied at its reply rather than received in place (a payload placed there meanwhile would be overwritten).
  bool DeliveriesOutstanding();
  bool UnplacedDeliveryOverlaps(const uint8_t* start, size_t bytes);
  // The first failure of a delivery since the last call, once.
  CUresult TakeAsyncError() { return async_error_.exchange(CUDA_SUCCESS); }

  // A notice: a sequence number registered before any request names it, answered by the executor when an event
  // happens on its side (a stream reached a host function). Await returns the executor's result, or the
  // session's error if it breaks first.
  class Notice {
   public:
    explicit Notice(Client& client);
    ~Notice();
    uint64_t sequence() const { return sequence_; }
    CUresult Await();
    // The notice's reply once Await succeeded (a graph host node's names the function to run).
    const ReplyMessage& reply() const { return reply_; }

   private:
    Client& client_;
    ReplyMessage reply_;
    Waiter waiter_;
    uint64_t sequence_ = 0;
  };

  // Pipelined exchange for bulk copies: many requests in flight, replies consumed oldest first. Other threads'
  // calls may interleave with these on the wire; each reply finds its caller by sequence number.
  class Pipeline {
   public:
    explicit Pipeline(Client& client) : client_(client) {}
    ~Pipeline();
    // Sends a request that wants a reply; false if the session is broken. With `place_at`, the reply's payload
    // (exactly `place_bytes`) may arrive there already (Channel::ExpectPayload): the reply's payload frame then
    // points at `place_at` and there is nothing to copy.
    bool Send(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
              std::span<const uint8_t> payload, uint8_t* place_at = nullptr, size_t place_bytes = 0);
    // Like Send, but the channel may send `payload` straight from the caller's memory (a tcp lane does: no copy on
    // the application's thread); the pipeline does not end (its destructor waits) before the channel is done with
    // every payload lent, so the caller's buffer is its own again when the copy returns.
    bool SendLent(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                  std::span<const uint8_t> payload);
    // Like SendLent for a request that wants no reply (Client::Post): only the loan is waited for.
    bool PostLent(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                  std::span<const uint8_t> payload);
    // Receives the oldest outstanding reply.
    CUresult Receive(ReplyMessage* reply);
    size_t outstanding() const { return pending_.size() - next_; }

   private:
    struct Loans {
      std::mutex mutex;
      std::condition_variable returned;
      size_t out = 0;
    };
    struct Slot {
      Waiter waiter;
      ReplyMessage reply;
      uint64_t sequence = 0;
      uint8_t* place_at = nullptr;
    };
    bool SendSlot(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                  std::span<const uint8_t> payload, uint8_t* place_at, size_t place_bytes,
                  std::function<void()> returned);
    // Counts a loan out; the function the channel calls when it gives the loan back.
    std::function<void()> Lend();
    Client& client_;
    std::vector<std::unique_ptr<Slot>> pending_;
    size_t next_ = 0;
    std::shared_ptr<Loans> loans_;  // made by the first SendLent; the channel's return calls may outlive nothing
  };

  const std::vector<DeviceInfo>& devices() const { return devices_; }
  int driver_version() const { return driver_version_; }
  CUmoduleLoadingMode module_loading_mode() const { return module_loading_mode_; }
  // The executor's directory when it runs on this host (ipc://), where files both map are made; else empty.
  const std::string& same_host_directory() const { return same_host_directory_; }
  // True when the executor shares no memory with this process (tcp://): mirrors and notices replace shared files.
  bool remote() const { return same_host_directory_.empty(); }
  // Same-host copies may use the executor's registered mappings (docs/architecture.md); CURELAY_DIRECT_COPIES=0 not.
  bool direct_copies() const { return !remote() && direct_copies_; }
  // The real driver's name and description of `code`, as learned at attach; false if it sent none.
  bool ErrorText(CUresult code, const char** name, const char** text) const;
  CUresult broken_result() const { return broken_.load(); }
  // How many payloads the session's channel moves at once (Channel::ParallelPayloads).
  size_t parallel_payloads() const { return channel_ != nullptr ? channel_->ParallelPayloads() : 1; }
  // Advanced by every change that can move an occupancy answer (function attributes, context cache and limit
  // settings): answers kept from an earlier epoch are asked again.
  uint64_t configuration_epoch() const { return configuration_epoch_.load(std::memory_order_acquire); }
  void ConfigurationChanged() { configuration_epoch_.fetch_add(1, std::memory_order_acq_rel); }

  std::array<PrimaryContext, 64>& primary_contexts() { return primary_contexts_; }
  // The stream priority range of a device, learned from the executor the first time it is needed.
  CUresult StreamPriorityRange(CUdevice device, int* least, int* greatest);
  std::mutex& primary_mutex() { return primary_mutex_; }

  HandleRegistry<CUctx_st> contexts;
  HandleRegistry<CUgreenCtx_st> green_contexts;
  HandleRegistry<CUdevResourceDesc_st> resource_descs;
  HandleRegistry<CUmod_st> modules;
  HandleRegistry<CUfunc_st> functions;
  HandleRegistry<CUstream_st> streams;
  HandleRegistry<CUlib_st> libraries;
  HandleRegistry<CUkern_st> kernels;
  HostAllocations host_allocations;
  CopyStaging copy_staging;  // same-host sessions: page-locked staging for pageable copies
  HandleRegistry<CUevent_st> events;
  HandleRegistry<CUlinkState_st> links;
  HandleRegistry<CUarray_st> arrays;
  HandleRegistry<CUmipmappedArray_st> mipmapped_arrays;
  HandleRegistry<CUtexref_st> texture_references;
  HandleRegistry<CUsurfref_st> surface_references;
  HostMirrors host_mirrors;

 private:
  // Device attributes as this session can honour them (what the executor's driver reports, less what a forwarded
  // session cannot give the application).
  void ServeableAttributes(DeviceInfo& device) const;
  Client() = default;
  CUresult Connect();
  // With init_mutex held: `result` becomes what cuInit answers from now on, and `client` the process's client if it
  // is CUDA_SUCCESS (else it is freed, and no entry point finds a client).
  static CUresult Install(Client* client, CUresult result);
  // What the executor's answer to Attach tells the session beyond the client's own fields.
  struct AttachAnswer {
    bool offer_accepted = false;
    std::string offer_answer;
    int device_count = 0;
  };
  // Sends Attach on `channel`; its sequence number, 0 if it could not be sent.
  uint64_t SendAttach(transport::Channel& channel, std::span<const uint8_t> session_key, const std::string& offer);
  CUresult ReadAttachAnswer(const transport::IncomingMessage& message, uint64_t sequence, AttachAnswer* answer);
  // Asks the executor for each device's description (once: later queries are answered here).
  CUresult LearnDevices(int device_count);
  uint64_t FinishRequest(flatbuffers::FlatBufferBuilder& builder, wire::Call type,
                         flatbuffers::Offset<void> call, bool wants_reply);
  // Sends one request; when `waiter` is given, it is registered for the reply before the request leaves. With
  // `place_at`, the channel is asked to receive the reply's payload there (Channel::ExpectPayload); a failed Send
  // leaves no placement or landing behind (every failure breaks the session, and Break withdraws them all). With
  // `returned`, the payload is lent to the channel (Channel::SendLoaned), which calls it exactly once, whatever
  // happens, when it no longer reads the payload.
  CUresult Send(flatbuffers::FlatBufferBuilder& builder, wire::Call type, flatbuffers::Offset<void> call,
                std::span<const uint8_t> payload, Waiter* waiter, uint64_t* sequence, uint8_t* place_at = nullptr,
                size_t place_bytes = 0, std::function<void()> returned = nullptr);
  // After a reply whose payload was to be placed at `place_at`: true if it was (nothing to copy); otherwise the
  // channel forgets the placement, so nothing writes there any more.
  bool TakePlacement(uint64_t sequence, const transport::Frame& payload, const uint8_t* place_at);
  // Waits for `waiter`'s reply. Whichever waiting thread gets there first reads the channel and hands each reply
  // to its waiter, so no thread holds the channel while it waits for the GPU.
  CUresult Wait(uint64_t sequence, Waiter& waiter);
  // Reads the channel (or waits for the thread that does) until `done()` holds; called with reply_mutex_ held.
  template <typename Done>
  void ReadUntil(std::unique_lock<std::mutex>& lock, Done done);
  // Hands one received message to its waiter, or applies it (mirror updates); false if it breaks the protocol.
  bool Dispatch(transport::IncomingMessage& message, const wire::Reply& reply, std::unique_lock<std::mutex>& lock);
  // Hands the driver log messages of this thread's call (`own`) and of posted work to the application's log, on this
  // thread; releases `lock`.
  void RecordDriverLog(std::unique_lock<std::mutex>& lock, std::vector<DriverLogMessage>& own);
  // Before work that may reach mapped host memory: sends what changed in active mirrors (under send_mutex_).
  bool SendMirrorChanges();
  CUresult Break(const char* why);

  std::unique_ptr<transport::Channel> channel_;  // shared memory over a ZeroMQ liveness channel, or ZeroMQ
  std::mutex send_mutex_;   // one request on the wire at a time; sequence numbers in wire order
  std::mutex io_mutex_;     // every channel operation, unless the channel is full duplex
  std::mutex reply_mutex_;  // guards waiters_, reader_active_ and the waiters' fields
  std::condition_variable reply_arrived_;
  bool reader_active_ = false;
  std::unordered_map<uint64_t, Waiter*> waiters_;
  uint64_t next_sequence_ = 1;
  int spin_microseconds_ = 0;  // how long a reader busy-polls a half-duplex channel before sleeping
  std::atomic<uint64_t> configuration_epoch_{0};
  bool direct_copies_ = true;
  std::atomic<CUresult> broken_{CUDA_SUCCESS};  // once set, every call fails with it (the session is gone)
  std::atomic<CUresult> async_error_{CUDA_SUCCESS};  // first failed delivery, for the next synchronizing call
  size_t outstanding_deliveries_ = 0;               // guarded by reply_mutex_
  // Driver log messages of posted requests (or of deliveries), for the next thread whose call is answered.
  std::vector<DriverLogMessage> owed_driver_log_;  // guarded by reply_mutex_
  size_t copying_deliveries_ = 0;  // guarded by reply_mutex_: the reader is copying these with the lock released
  flatbuffers::FlatBufferBuilder mirror_builder_;   // guarded by send_mutex_
  std::vector<wire::MirrorRange> mirror_runs_;      // guarded by send_mutex_
  std::vector<uint8_t> mirror_data_;                // guarded by send_mutex_

  int driver_version_ = 0;
  CUmoduleLoadingMode module_loading_mode_ = CU_MODULE_EAGER_LOADING;
  std::string same_host_directory_;
  std::string executor_endpoint_;  // named in the one log line when the session breaks
  std::vector<DeviceInfo> devices_;
  struct ErrorTextEntry {
    std::string name, text;
  };
  std::unordered_map<int, ErrorTextEntry> error_texts_;
  std::mutex primary_mutex_;
  std::array<PrimaryContext, 64> primary_contexts_{};
  struct PriorityRange {
    bool known = false;
    int least = 0, greatest = 0;
  };
  std::array<PriorityRange, 64> priority_ranges_{};
};

// The calling thread's current context (the top of its context stack), or nullptr.
CUcontext CurrentContext();
std::vector<CUcontext>& ContextStack();
// Wire id of the calling thread's current context, 0 if none.
uint64_t CurrentContextId();
// The wire encoding of a stream handle; CUDA_ERROR_INVALID_HANDLE for one that is not alive.
CUresult WireStream(Client& client, CUstream stream, uint64_t* wire_stream);
// The stream of a copy: a synchronous one (*async false) runs on the legacy stream as the driver's synchronous
// call; inside a per-thread form (`_ptds`) it is ordered on the thread's default stream instead, so it travels as
// that stream's work (*async becomes true) and the caller still waits for what a synchronous copy promises.
CUresult CopyStream(Client& client, CUstream stream, bool* async, uint64_t* wire_stream);
// The calling thread's builder, cleared, for building one request.
flatbuffers::FlatBufferBuilder& Builder();
// The calling thread's scratch buffer for packing kernel arguments.
std::vector<uint8_t>& ArgumentBuffer();

}  // namespace curelay::frontend
