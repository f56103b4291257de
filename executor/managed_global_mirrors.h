// Managed globals (__managed__ variables) of a same-host client. The driver puts them in this process's managed
// memory, where the application cannot reach them; so the application's pages at the variables' addresses are a
// shared file, mapped here too, and this keeps the two copies in step: what the application wrote since the last
// look goes into the variables before each request is served, and what the GPU wrote goes into the application's
// pages before each answer. Both directions move only the bytes that changed against a shadow of what the two last
// agreed on, so writes to different bytes never undo each other; a byte both sides changed takes the application's
// value at the next request. Not done during a stream capture (its copies would end the capture).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "executor/driver.h"

namespace curelay::executor {

class ManagedGlobalMirrors {
 public:
  explicit ManagedGlobalMirrors(Driver& driver) : driver_(driver) {}
  ManagedGlobalMirrors(const ManagedGlobalMirrors&) = delete;
  ManagedGlobalMirrors& operator=(const ManagedGlobalMirrors&) = delete;
  ~ManagedGlobalMirrors();

  struct Owner {
    uint64_t module_id = 0;   // one of the two is set
    uint64_t library_id = 0;
    bool operator==(const Owner&) const = default;
  };
  // Shares the managed global at [address, +bytes) of `context`. With a `path`, the client's pages
  // [map_address, +map_bytes) are that file (in `directory`), new here; without, the global's pages must already be
  // shared. The application's pages get the variable's current bytes.
  CUresult Share(CUcontext context, Owner owner, uint64_t address, uint64_t bytes, const std::string& path,
                 uint64_t map_address, uint64_t map_bytes, const std::string& directory);
  void Forget(Owner owner);
  // Before `context` is destroyed or reset: its variables are gone.
  void ForgetContext(CUcontext context);
  bool empty() const { return globals_.empty(); }
  // Whether [address, +bytes) overlaps a shared variable.
  bool Overlaps(uint64_t address, uint64_t bytes) const;

  // The application's writes since the last look, into the variables (before a request is served).
  void PushApplicationWrites();
  // The GPU's writes since the last look, into the application's pages (before an answer goes out).
  void PullDeviceWrites();

 private:
  // A shared file: pages of the application's, which variables of any owner may lie on.
  struct Pages {
    uint64_t client_address = 0;  // where the application maps them (page-aligned)
    uint64_t bytes = 0;
    uint8_t* mapping = nullptr;  // the same file here
  };
  // A global, or the part of it on one file's pages.
  struct Global {
    CUcontext context = nullptr;
    Owner owner;
    CUdeviceptr variable = 0;
    uint8_t* application = nullptr;  // the bytes in the shared file
    std::vector<uint8_t> shadow;     // what both last agreed on
  };
  // Runs `body` with `context` current (and a non-blocking stream of it for the copies), then restores the current
  // context. False if that could not be done.
  template <typename Body>
  bool InContext(CUcontext context, Body body);
  CUresult CopyFromDevice(CUstream stream, uint8_t* to, CUdeviceptr from, uint64_t bytes);
  void Unmap(const Pages& pages);
  // Unmaps the files no variable lies on any more.
  void DropUnusedPages();

  Driver& driver_;
  std::vector<Pages> pages_;
  std::vector<Global> globals_;
  std::map<CUcontext, CUstream> streams_;
  std::vector<uint8_t> scratch_;
  std::vector<std::pair<uint64_t, uint64_t>> runs_;
};

}  // namespace curelay::executor
