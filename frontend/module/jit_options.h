// JIT options of cuModuleLoadDataEx / cuLibraryLoadData across the wire. Scalar options travel as values; the log
// buffers stay here (the executor uses its own and sends the text back), and output options are written back.
#pragma once

#include <cuda.h>

#include <vector>

#include "schema/wire.h"

namespace curelay::frontend {

// CUDA_ERROR_NOT_SUPPORTED for options whose values point at host arrays we do not forward (symbol tables).
CUresult EncodeJitOptions(flatbuffers::FlatBufferBuilder& builder, unsigned int count, const CUjit_option* options,
                          void* const* values,
                          flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::JitOption>>>* encoded);

// Copies the logs into the caller's buffers and writes back the output options, as the driver would.
void ApplyJitLogs(const wire::JitLogs* logs, unsigned int count, const CUjit_option* options, void** values);

}  // namespace curelay::frontend
