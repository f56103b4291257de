// Host functions (cuLaunchHostFunc, cuStreamAddCallback) of a same-host session meet on a board of gates in a
// shared file, so that neither side's message loop is in the path: a host function must run in the client while
// its stream waits, even when the executor's thread is blocked in a driver call that waits for that stream.
//
// One 32-bit gate per outstanding host function. The client claims an idle gate (kIdle -> kLaunched) before asking
// the executor to launch; the executor's driver callback, when the stream gets there, moves it to kReached and
// waits; the client runs the function and moves it to kReturned; the callback sees that, frees the gate (kIdle)
// and the stream goes on. Both sides wait on the gate word with a futex (shared, not process-private).
// After the gates, one 64-bit function word per gate: a graph's host node writes the client's id of the host
// function to run there before it moves the gate to kReached (a cuLaunchHostFunc gate's thread knows its function).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>

namespace curelay::transport {

inline constexpr size_t kHostFunctionGates = 1024;
inline constexpr size_t kHostFunctionBoardBytes = kHostFunctionGates * (sizeof(uint32_t) + sizeof(uint64_t));
inline constexpr char kHostFunctionBoardPrefix[] = "hostfn";

enum HostFunctionGate : uint32_t { kGateIdle = 0, kGateLaunched = 1, kGateReached = 2, kGateReturned = 3 };

using GateWord = std::atomic<uint32_t>;
static_assert(sizeof(GateWord) == sizeof(uint32_t) && GateWord::is_always_lock_free);

// The function words that follow the gates.
inline std::atomic<uint64_t>* GateFunctions(GateWord* board) {
  return reinterpret_cast<std::atomic<uint64_t>*>(board + kHostFunctionGates);
}
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) && std::atomic<uint64_t>::is_always_lock_free);
static_assert(kHostFunctionGates * sizeof(uint32_t) % alignof(uint64_t) == 0);

inline void WakeGate(GateWord* gate) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(gate), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Waits while the gate still holds `value`, at most `timeout_ms` (so callers can notice a peer that went away).
inline void WaitGate(GateWord* gate, uint32_t value, int timeout_ms) {
  timespec timeout{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(gate), FUTEX_WAIT, value, &timeout, nullptr, 0);
}

}  // namespace curelay::transport
