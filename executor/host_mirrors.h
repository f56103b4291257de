// The executor's side of remote page-locked memory (frontend/client/host_mirrors.h): one page-locked, device-mapped
// mirror per client allocation, at the client's address when that range is free here. The session's thread and
// the driver's callback threads (host-function notices) both send through SendWithChanges, which keeps "what
// changed in the mirrors" and the message it belongs to together on the wire.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "executor/driver.h"
#include "schema/wire.h"
#include "transport/channel.h"

namespace curelay::executor {

class HostMirrors {
 public:
  explicit HostMirrors(Driver& driver) : driver_(driver) {}
  // Maps and registers a mirror of `bytes` (page-aligned), at `client_address` if that range is free here.
  CUresult Create(uint64_t bytes, uint64_t client_address, CUdeviceptr* device_ptr);
  // Unregisters the mirror at `device_ptr` (false if there is none). Its memory stays mapped, and its changes are
  // still sent, until the next send after that: the message answering the removal carries its last changes (what
  // the device wrote while the driver waited for queued work), and the mirror goes then.
  bool Remove(CUdeviceptr device_ptr, CUresult* result);
  // Applies the client's changes; every mirror it names takes part in coherence from now on. False if malformed.
  bool Apply(const wire::MirrorUpdate& update, std::span<const uint8_t> payload);
  // Sends what changed in the active mirrors (as sequence-0 replies), then this message; with `returned`, its
  // payload is loaned to the channel (Channel::SendLoaned, under `placement_key`), and `returned` runs in every
  // case.
  bool SendWithChanges(transport::Channel& channel, std::span<const uint8_t> header,
                       std::span<const uint8_t> payload, std::function<void()> returned = {},
                       uint64_t placement_key = 0);
  void ReleaseAll();

 private:
  struct Mirror {
    uint8_t* memory = nullptr;
    uint64_t bytes = 0;
    std::unique_ptr<uint8_t[]> shadow;  // allocated when the client first names the mirror (it starts as zeros)
    bool removing = false;      // Remove is unregistering it
    bool unregistered = false;  // its last changes go with the next send, then it is unmapped
  };
  bool SendChangesLocked(transport::Channel& channel);
  void DropUnregisteredLocked();

  Driver& driver_;
  std::mutex mutex_;
  std::map<CUdeviceptr, Mirror> mirrors_;
  size_t active_ = 0;
  flatbuffers::FlatBufferBuilder builder_;
  std::vector<wire::MirrorRange> runs_;
  std::vector<uint8_t> data_;
};

}  // namespace curelay::executor
