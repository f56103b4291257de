// An application's JIT options as this executor's driver takes them: scalar values as the client sent them, and log
// buffers of our own (bounded, so a client cannot make the executor allocate without limit) whose text goes back
// in JitLogs. The driver is given pointers into this object, so it neither moves nor copies.
#pragma once

#include <cuda.h>

#include <string>
#include <vector>

#include "schema/wire.h"

namespace curelay::executor {

class JitOptionSet {
 public:
  explicit JitOptionSet(const flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>* wire_options);
  JitOptionSet(const JitOptionSet&) = delete;
  JitOptionSet& operator=(const JitOptionSet&) = delete;

  // False when an option is no CUjit_option at all (out of the enum's range): the call is then refused, with
  // CUDA_ERROR_INVALID_VALUE, before the driver sees it.
  bool valid() const { return valid_; }
  unsigned int count() const { return static_cast<unsigned int>(options_.size()); }
  CUjit_option* options() { return options_.data(); }
  void** values() { return values_.data(); }
  // The logs and wall time the driver has written so far.
  flatbuffers::Offset<wire::JitLogs> Logs(flatbuffers::FlatBufferBuilder& builder) const;

 private:
  std::vector<CUjit_option> options_;
  std::vector<void*> values_;
  std::string info_log_, error_log_;
  size_t info_index_ = SIZE_MAX, error_index_ = SIZE_MAX, wall_index_ = SIZE_MAX;
  bool valid_ = true;
};

}  // namespace curelay::executor
