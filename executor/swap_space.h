// The backend's swap space as an executor sees it: host memory the backend set aside for swapped-out sessions
// ([swap] host_budget_mib), mapped here whole. The backend hands each swap-out its extent; the executor copies its
// session's memory there and back. Copies from page-locked memory run at the PCIe rate (~50 GB/s measured on the
// GPU host) instead of the pageable rate (5-11 GB/s), so the extent is page-locked (cuMemHostRegister) before the
// first swap-out into it, on the session's thread while the session is quiesced: page-locking takes the process's
// driver lock for as long as it runs (about 2 s for 34 GiB; the whole space at once would stall the session's own
// work for seconds), and the registration is kept, since the backend gives a session its previous extent again
// whenever it is free.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>
#include <string>

#include "executor/driver.h"

namespace curelay::executor {

class SwapSpace {
 public:
  explicit SwapSpace(Driver& driver) : driver_(driver) {}
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // Maps `bytes` of the file at `path` (the backend's); false with `error` when it cannot.
  bool Open(const std::string& path, uint64_t bytes, std::string* error);
  bool available() const { return base_ != nullptr; }
  uint64_t size() const { return bytes_; }
  // [offset, offset + bytes) of the space; null when it lies outside.
  uint8_t* At(uint64_t offset, uint64_t bytes) const;
  // The same, page-locked first unless it already is (with the current context's driver); still usable, at the
  // pageable rate, when page-locking fails.
  uint8_t* Prepare(uint64_t offset, uint64_t bytes);

 private:
  Driver& driver_;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  std::vector<bool> locked_;  // by block
  bool lock_failure_logged_ = false;
};

}  // namespace curelay::executor
