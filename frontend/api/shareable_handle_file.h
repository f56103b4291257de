// What the application holds for a shareable handle (a POSIX file descriptor from cuMemExportToShareableHandle or
// cuMemPoolExportToShareableHandle): a sealed memfd of this process holding the token that names the driver's
// descriptor in the exporting executor (executor/shareable_handles.h), and the device of an exported pool. The
// application passes it to another process as it would the driver's (SCM_RIGHTS, fork); that process's shim
// reads it back.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "curelay_generated.h"

namespace curelay::frontend {

inline constexpr size_t kShareableTokenBytes = 16;

// A new descriptor holding `token` (as the executor answered it) and `device`.
CUresult WrapShareableToken(const flatbuffers::Vector<uint8_t>* token, int32_t device, int* descriptor);
// The token and device in a descriptor WrapShareableToken made (in any process); false for any other descriptor.
bool UnwrapShareableToken(int descriptor, uint8_t (&token)[kShareableTokenBytes], int32_t* device);

}  // namespace curelay::frontend
