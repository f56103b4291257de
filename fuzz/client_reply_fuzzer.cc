// The shim's decoding of what an executor answers: the real client code (frontend/, linked into this program as
// into libcuda.so.1) runs a short program of driver API calls against a "session executor" whose every answer is
// the fuzz input. Input: the first record (fuzz_input.h) is the program, one action per byte (kActions below,
// at most kMaxActions); then each pair of records is one message the executor sends, in order, whatever the client
// asked: a FlatBuffers header frame (a Reply) and a payload frame (empty: none). The first answers the Attach,
// the next ones the device queries, then the program's calls. When the messages are used up the executor is gone:
// the client must break the session and fail every later call, never hang or crash.
//
// Invariants beyond the sanitizers: every request the client sends passes the verifier as a Request, and every
// input ends with the client freed (Client::Forget), so one input leaves nothing behind for the next.
//
// Seeds are recorded, not written by hand: with CURELAY_CLIENT_FUZZ_RECORD=DIR the program instead runs each seed
// program against a real executor::Session on the emulated driver (two threads, an in-process channel) and writes
// what that executor answered, framed as above, into DIR (fuzz/corpus/client_reply_fuzzer/ is made this way; see
// docs/fuzzing.md).
#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "executor/driver.h"
#include "executor/session.h"
#include "frontend/client/client.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/owned_frame.h"
#include "schema/wire.h"
#include "transport/channel.h"

namespace {

using namespace curelay;

struct Message {
  std::vector<uint8_t> header;
  std::vector<uint8_t> payload;
};

using fuzz::OwnedFrame;

void CheckRequest(std::span<const uint8_t> header) {
  if (wire::ParseVerified<wire::Request>(header) == nullptr) {
    std::fprintf(stderr, "client_reply_fuzzer: the client sent a message that is not a valid Request (%zu bytes)\n",
                 header.size());
    std::abort();
  }
}

// The executor as the input plays it: answers in order, then gone.
class ScriptedExecutor final : public transport::Channel {
 public:
  explicit ScriptedExecutor(std::deque<Message> answers) : answers_(std::move(answers)) {}
  bool Send(std::span<const uint8_t> header, std::span<const uint8_t>) override {
    CheckRequest(header);
    return !lost_;
  }
  transport::ReceiveStatus Receive(transport::IncomingMessage& message, int) override {
    if (answers_.empty()) {
      lost_ = true;
      return transport::ReceiveStatus::kPeerLost;
    }
    message.header = OwnedFrame(answers_.front().header);
    message.payload = OwnedFrame(answers_.front().payload);
    answers_.pop_front();
    return transport::ReceiveStatus::kMessage;
  }
  bool PeerLost() override { return lost_; }
  bool PeerSeen() override { return true; }
  void AwaitActivity(int) override {}
  std::string BoundEndpoint(std::string_view) const override { return {}; }

 private:
  std::deque<Message> answers_;
  bool lost_ = false;
};

// The state a program's calls share: what earlier calls made (null or 0 until then).
struct Objects {
  CUcontext context = nullptr;
  CUdeviceptr buffer = 0;
  CUdeviceptr second = 0;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  CUstream stream = nullptr;
  CUevent start = nullptr, end = nullptr;
  CUmemoryPool pool = nullptr;
  alignas(16) uint8_t host[4096] = {};
};

constexpr size_t kBufferBytes = 4096;

// A module the emulated driver binds (tests/emulated_driver/kernels.cc: fill_u32's layout, a global of its own).
constexpr char kPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .global .align 4 .u32 global_counter;\n"
    ".visible .entry fill_u32(.param .u64 out, .param .u32 value, .param .u64 count)\n{\nret;\n}\n";

// One action per input byte: each a driver call (or a few) whose answer the client decodes.
using Action = void (*)(Objects&);
const Action kActions[] = {
    [](Objects& o) {  // 0: device queries answered from the attach's descriptions
      int count = 0;
      cuDeviceGetCount(&count);
      CUdevice device = 0;
      cuDeviceGet(&device, 0);
      char name[64];
      cuDeviceGetName(name, sizeof(name), device);
      int value = 0;
      cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
      size_t total = 0;
      cuDeviceTotalMem(&total, device);
      (void)o;
    },
    [](Objects& o) {  // 1: the primary context, made current
      if (cuDevicePrimaryCtxRetain(&o.context, 0) == CUDA_SUCCESS) cuCtxSetCurrent(o.context);
    },
    [](Objects&) { cuCtxSynchronize(); },
    [](Objects& o) {  // 3
      if (o.buffer == 0) cuMemAlloc(&o.buffer, kBufferBytes);
      else if (o.second == 0) cuMemAlloc(&o.second, kBufferBytes);
    },
    [](Objects& o) {  // 4
      if (o.second != 0 && cuMemFree(o.second) == CUDA_SUCCESS) o.second = 0;
    },
    [](Objects& o) { cuMemcpyHtoD(o.buffer, o.host, kBufferBytes); },
    [](Objects& o) { cuMemcpyDtoH(o.host, o.buffer, kBufferBytes); },
    [](Objects& o) { cuMemsetD8(o.buffer, 0x5a, kBufferBytes); },
    [](Objects&) {  // 8
      size_t free_bytes = 0, total = 0;
      cuMemGetInfo(&free_bytes, &total);
    },
    [](Objects& o) {  // 9
      if (o.module == nullptr) cuModuleLoadData(&o.module, kPtx);
    },
    [](Objects& o) { cuModuleGetFunction(&o.function, o.module, "fill_u32"); },
    [](Objects& o) {  // 11
      int value = 0;
      cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, o.function);
      cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, o.function);
    },
    [](Objects& o) {  // 12
      // The shim reads each argument with the size the executor's parameter layout states: the kernel's signature,
      // which only the GPU host's driver knows (docs/protocol.md, "What the shim trusts"). So each argument here is
      // as big as any layout of the driver's form may make it, as an application's arguments match its kernel.
      alignas(16) static uint8_t arguments[3][32764];
      const uint64_t count = kBufferBytes / 4;
      const uint32_t value = 7;
      std::memcpy(arguments[0], &o.buffer, sizeof o.buffer);
      std::memcpy(arguments[1], &value, sizeof value);
      std::memcpy(arguments[2], &count, sizeof count);
      void* pointers[] = {arguments[0], arguments[1], arguments[2]};
      cuLaunchKernel(o.function, 4, 1, 1, 256, 1, 1, 0, o.stream, pointers, nullptr);
    },
    [](Objects& o) {  // 13
      if (o.stream == nullptr) cuStreamCreate(&o.stream, CU_STREAM_NON_BLOCKING);
    },
    [](Objects& o) { cuStreamSynchronize(o.stream); },
    [](Objects& o) { cuStreamQuery(o.stream); },
    [](Objects& o) {  // 16
      if (o.start == nullptr) cuEventCreate(&o.start, CU_EVENT_DEFAULT);
      if (o.end == nullptr) cuEventCreate(&o.end, CU_EVENT_DEFAULT);
      cuEventRecord(o.start, o.stream);
      cuEventRecord(o.end, o.stream);
    },
    [](Objects& o) {  // 17
      cuEventSynchronize(o.end);
      float milliseconds = 0;
      cuEventElapsedTime(&milliseconds, o.start, o.end);
      cuEventQuery(o.start);
    },
    [](Objects& o) { cuMemcpyDtoHAsync(o.host, o.buffer, kBufferBytes, o.stream); },
    [](Objects& o) {  // 19
      unsigned int type = 0;
      cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, o.buffer);
      unsigned int managed = 0;  // a "boolean" the driver writes in 4 bytes
      CUpointer_attribute asked[] = {CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
      size_t range = 0;
      void* answers[] = {&managed, &range};
      cuPointerGetAttributes(2, asked, answers, o.buffer);
      CUdeviceptr base = 0;
      size_t bytes = 0;
      cuMemGetAddressRange(&base, &bytes, o.buffer + 16);
    },
    [](Objects&) {  // 20
      size_t value = 0;
      cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE);
      cuCtxGetLimit(&value, CU_LIMIT_MALLOC_HEAP_SIZE);
      CUfunc_cache config;
      cuCtxGetCacheConfig(&config);
    },
    [](Objects& o) {  // 21
      int least = 0, greatest = 0;
      cuCtxGetStreamPriorityRange(&least, &greatest);
      int priority = 0;
      cuStreamGetPriority(o.stream, &priority);
      unsigned int version = 0;
      cuCtxGetApiVersion(o.context, &version);
      unsigned int flags = 0;
      int active = 0;
      cuDevicePrimaryCtxGetState(0, &flags, &active);
    },
    [](Objects& o) {  // 22
      int blocks = 0;
      cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, o.function, 256, 0);
      int grid = 0, block = 0;
      cuOccupancyMaxPotentialBlockSize(&grid, &block, o.function, nullptr, 0, 0);
    },
    [](Objects& o) {  // 23
      CUdeviceptr global = 0;
      size_t bytes = 0;
      cuModuleGetGlobal(&global, &bytes, o.module, "global_counter");
    },
    [](Objects& o) {  // 24
      CUdeviceptr pooled = 0;
      if (cuMemAllocAsync(&pooled, kBufferBytes, o.stream) == CUDA_SUCCESS) cuMemFreeAsync(pooled, o.stream);
      cuDeviceGetDefaultMemPool(&o.pool, 0);
      cuuint64_t value = 0;
      cuMemPoolGetAttribute(o.pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value);
    },
    [](Objects& o) { cuMemcpyDtoD(o.second, o.buffer, kBufferBytes); },
    [](Objects& o) {  // 26: the stream's capture into a graph, instantiated and launched
      if (cuStreamBeginCapture(o.stream, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS) return;
      cuMemsetD8Async(o.buffer, 1, kBufferBytes, o.stream);
      CUgraph graph = nullptr;
      if (cuStreamEndCapture(o.stream, &graph) != CUDA_SUCCESS || graph == nullptr) return;
      size_t count = 0;
      cuGraphGetNodes(graph, nullptr, &count);
      CUgraphExec exec = nullptr;
      if (cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS) {
        cuGraphLaunch(exec, o.stream);
        cuGraphExecDestroy(exec);
      }
      cuGraphDestroy(graph);
    },
    [](Objects& o) {  // 27: teardown of what the program made
      if (o.module != nullptr && cuModuleUnload(o.module) == CUDA_SUCCESS) {
        o.module = nullptr;
        o.function = nullptr;
      }
      if (o.stream != nullptr && cuStreamDestroy(o.stream) == CUDA_SUCCESS) o.stream = nullptr;
      if (o.start != nullptr && cuEventDestroy(o.start) == CUDA_SUCCESS) o.start = nullptr;
      if (o.end != nullptr && cuEventDestroy(o.end) == CUDA_SUCCESS) o.end = nullptr;
      if (o.buffer != 0 && cuMemFree(o.buffer) == CUDA_SUCCESS) o.buffer = 0;
    },
};
constexpr size_t kActionCount = sizeof(kActions) / sizeof(kActions[0]);
constexpr size_t kMaxActions = 64;

// Runs `program` (action bytes) on a client over `channel`.
void RunProgram(std::unique_ptr<transport::Channel> channel, std::span<const uint8_t> program) {
  const std::vector<uint8_t> key(wire::kSessionKeyBytes, 0x5a);
  frontend::Client::InitializeOver(std::move(channel), key);
  cuInit(0);  // answers the outcome of the attach
  Objects objects;
  size_t done = 0;
  for (const uint8_t action : program) {
    if (done++ == kMaxActions) break;
    kActions[action % kActionCount](objects);
  }
  frontend::Client::Forget();
}

// ---- Recording seeds against a real executor ----

// One direction of an in-process connection.
struct Pipe {
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<Message> messages;
  bool closed = false;
};

// One end of the connection: sends into `out`, receives from `in`; what it receives is also kept in `record`.
class PipeEnd final : public transport::Channel {
 public:
  PipeEnd(std::shared_ptr<Pipe> in, std::shared_ptr<Pipe> out, std::vector<Message>* record)
      : in_(std::move(in)), out_(std::move(out)), record_(record) {}
  ~PipeEnd() override {
    std::lock_guard<std::mutex> lock(out_->mutex);
    out_->closed = true;
    out_->arrived.notify_all();
  }
  bool Send(std::span<const uint8_t> header, std::span<const uint8_t> payload) override {
    if (record_ != nullptr) CheckRequest(header);  // the client's end
    std::lock_guard<std::mutex> lock(out_->mutex);
    if (out_->closed) return false;
    out_->messages.push_back({{header.begin(), header.end()}, {payload.begin(), payload.end()}});
    out_->arrived.notify_all();
    return true;
  }
  transport::ReceiveStatus Receive(transport::IncomingMessage& message, int timeout_ms) override {
    std::unique_lock<std::mutex> lock(in_->mutex);
    const auto ready = [&] { return !in_->messages.empty() || in_->closed; };
    if (timeout_ms < 0) {
      in_->arrived.wait(lock, ready);
    } else if (!in_->arrived.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
      return transport::ReceiveStatus::kTimeout;
    }
    if (in_->messages.empty()) return transport::ReceiveStatus::kPeerLost;
    Message next = std::move(in_->messages.front());
    in_->messages.pop_front();
    lock.unlock();
    message.header = OwnedFrame(next.header);
    message.payload = OwnedFrame(next.payload);
    if (record_ != nullptr) record_->push_back(std::move(next));
    return transport::ReceiveStatus::kMessage;
  }
  bool PeerLost() override {
    std::lock_guard<std::mutex> lock(in_->mutex);
    return in_->closed && in_->messages.empty();
  }
  bool PeerSeen() override { return true; }
  void AwaitActivity(int timeout_ms) override {
    std::unique_lock<std::mutex> lock(in_->mutex);
    in_->arrived.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                          [&] { return !in_->messages.empty() || in_->closed; });
  }
  std::string BoundEndpoint(std::string_view) const override { return {}; }

 private:
  std::shared_ptr<Pipe> in_, out_;
  std::vector<Message>* record_;
};

void AppendRecord(std::string& out, std::span<const uint8_t> bytes) {
  const uint32_t length = static_cast<uint32_t>(bytes.size());
  out.append(reinterpret_cast<const char*>(&length), sizeof(length));
  out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// The seed programs: each a realistic use that reaches a family of answers.
const std::vector<std::pair<const char*, std::vector<uint8_t>>> kSeedPrograms = {
    {"devices", {0, 1, 21, 20, 2}},
    {"copies", {1, 3, 3, 5, 7, 6, 25, 19, 8, 4, 27}},
    {"kernel", {1, 3, 9, 10, 11, 22, 23, 12, 2, 6, 27}},
    {"stream-events", {1, 3, 13, 16, 18, 17, 14, 15, 27}},
    {"pools-graphs", {1, 3, 13, 24, 26, 14, 27}},
    {"everything", {0,  1,  2,  3,  3,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17,
                    18, 19, 20, 21, 22, 23, 24, 25, 26, 4,  27}},
};

int RecordSeeds(const char* directory) {
  setenv("CURELAY_EMU_DEVICE_COUNT", "1", 0);
  setenv("CURELAY_EMU_DEVICE_MEMORY", "256M", 0);
  executor::Driver driver;
  std::string error;
  if (!driver.Load(CURELAY_FUZZ_EMULATED_DRIVER, &error) || driver.cuInit(0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "client_reply_fuzzer: cannot start the emulated driver: %s\n", error.c_str());
    return 1;
  }
  for (const auto& [name, program] : kSeedPrograms) {
    auto to_executor = std::make_shared<Pipe>();
    auto to_client = std::make_shared<Pipe>();
    std::vector<Message> answers;
    const std::vector<uint8_t> key(wire::kSessionKeyBytes, 0x5a);
    std::thread executor([&] {
      executor::Session session(driver, std::make_shared<PipeEnd>(to_executor, to_client, nullptr), key);
      session.Run();
    });
    RunProgram(std::make_unique<PipeEnd>(to_client, to_executor, &answers), program);
    executor.join();
    std::string seed;
    AppendRecord(seed, program);
    for (const Message& answer : answers) {
      AppendRecord(seed, answer.header);
      AppendRecord(seed, answer.payload);
    }
    const std::string path = std::string(directory) + "/" + name;
    std::ofstream(path, std::ios::binary) << seed;
    std::printf("client_reply_fuzzer: %s: %zu actions, %zu answers, %zu bytes\n", path.c_str(), program.size(),
                answers.size(), seed.size());
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The shim logs a broken session once per input and every refusal at debug level; at this rate that is noise.
  const char* verbose = std::getenv("CURELAY_FUZZ_LOG");
  setenv("CURELAY_LOG_LEVEL", verbose != nullptr ? verbose : "off", 1);
  spdlog::set_level(verbose != nullptr ? spdlog::level::debug : spdlog::level::off);
  if (const char* directory = std::getenv("CURELAY_CLIENT_FUZZ_RECORD"); directory != nullptr) {
    std::exit(RecordSeeds(directory));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::RecordReader input(data, size);
  const auto program = input.Next();
  std::deque<Message> answers;
  while (!input.done()) {
    const auto header = input.Next();
    const auto payload = input.Next();
    answers.push_back({{header.begin(), header.end()}, {payload.begin(), payload.end()}});
  }
  RunProgram(std::make_unique<ScriptedExecutor>(std::move(answers)), program);
  return 0;
}
