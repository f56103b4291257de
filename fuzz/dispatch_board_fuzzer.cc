// The scheduler's dispatch board as the backend reads it (backend/dispatch/dispatch_board.cc,
// dispatch_service.cc): an executor owns its session's slot, so the ring's head and every event in it (kind, GPU,
// kernel key, GPU time) are whatever that process wrote. The harness runs a real DispatchService (its board file in
// a private directory, its scheduler thread draining every 100 us) with one tenant session on GPUs 0 and 3, and
// plays the executor on the same file. Each record of the input (fuzz_input.h) is one operation, its first byte
// choosing which:
//   0 push one event as the executor's DispatchBoard::Push does (24 bytes: kind, gpu, kernel, gpu_ns)
//   1 write one event's bytes at any ring index (u16 index, then 24 bytes), hostile
//   2 set the ring's head (u64), hostile       3 wait until the backend has drained the ring (at most 2 ms)
// At the end the figures backendctl and the metrics endpoint read are computed from what was reported.
// Every input gets a new service on the same board file: creating the 13 MiB board is what made the harness slow
// (55 inputs/s), and the service resets the slot it opens, so no input sees another's events.
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "backend/dispatch/dispatch_board.h"
#include "backend/dispatch/dispatch_service.h"
#include "backend/tenants/tenant_record.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/scratch_directory.h"

namespace {

using namespace curelay::backend;

std::string directory;
constexpr int kSlot = 5;

void AwaitDrained(SessionDispatchSlot& slot) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
  while (slot.tail.load() != slot.head.load() && std::chrono::steady_clock::now() < deadline) {
    struct timespec pause = {0, 50'000};
    nanosleep(&pause, nullptr);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  directory = curelay::fuzz::MakeScratchDirectory("curelay-dispatch-fuzz");
  std::atexit([] {
    unlink((directory + "/dispatch").c_str());
    rmdir(directory.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = directory + "/dispatch";
  std::string error;
  DispatchService service{curelay::scheduler::SchedulerConfig{}};
  if (!service.Start(path, &error)) {
    std::fprintf(stderr, "dispatch_board_fuzzer: %s\n", error.c_str());
    std::abort();
  }
  TenantRecord tenant;
  tenant.name = "fuzz";
  service.SetTenant(tenant);
  std::unique_ptr<DispatchBoard> executor(DispatchBoard::Open(path, &error));
  if (executor == nullptr) {
    std::fprintf(stderr, "dispatch_board_fuzzer: %s\n", error.c_str());
    std::abort();
  }
  // What an earlier input left in the slot (its ring's bytes and indices) is cleared while no session is open on
  // it (the backend drains only open sessions), so each input runs as on a new board.
  SessionDispatchSlot& slot = executor->slot(kSlot);
  slot.head.store(0);
  slot.tail.store(0);
  std::memset(static_cast<void*>(slot.events), 0, sizeof slot.events);
  if (!service.OpenSession(1, tenant.name, kSlot, {0, 3}, &error)) {
    std::fprintf(stderr, "dispatch_board_fuzzer: %s\n", error.c_str());
    std::abort();
  }
  curelay::fuzz::RecordReader input(data, size);
  while (!input.done()) {
    const auto record = input.Next();
    if (record.empty()) continue;
    const auto operand = record.subspan(1);
    switch (record[0] % 4) {
      case 0: {
        DispatchEvent event{};
        std::memcpy(&event, operand.data(), std::min(operand.size(), sizeof(event)));
        while (!DispatchBoard::Push(slot, event) && slot.head.load() - slot.tail.load() <= kDispatchRingEvents) {
          AwaitDrained(slot);  // full: the executor waits for the backend, as DispatchGate does
        }
        break;
      }
      case 1: {
        uint16_t index = 0;
        std::memcpy(&index, operand.data(), std::min(operand.size(), sizeof(index)));
        const auto bytes = operand.subspan(std::min(operand.size(), sizeof(index)));
        std::memcpy(&slot.events[index % kDispatchRingEvents], bytes.data(), std::min(bytes.size(), sizeof(DispatchEvent)));
        break;
      }
      case 2: {
        uint64_t head = 0;
        std::memcpy(&head, operand.data(), std::min(operand.size(), sizeof(head)));
        slot.head.store(head);
        break;
      }
      case 3:
        AwaitDrained(slot);
        break;
    }
  }
  AwaitDrained(slot);
  (void)service.Figures(tenant.name);
  for (int gpu : {0, 3}) {
    (void)service.Utilization(gpu);
    (void)service.BusySeconds(gpu);
  }
  service.CloseSession(1);
  service.Stop();
  return 0;
}
