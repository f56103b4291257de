// cuLaunchKernelEx attributes on the wire: values travel as raw bytes, except that events are named by their
// curelay ids (an event handle means nothing in the executor).
#pragma once

#include <cuda.h>

#include <span>
#include <vector>

#include "schema/wire.h"

namespace curelay::frontend {

class Client;

// Builds the wire form of `attributes`. CU_LAUNCH_ATTRIBUTE_IGNORE entries are dropped; an attribute the shim
// cannot carry (device-updatable kernel nodes: a graph feature) gives CUDA_ERROR_NOT_SUPPORTED, an unknown
// event CUDA_ERROR_INVALID_HANDLE.
CUresult EncodeLaunchAttributes(
    Client& client, std::span<const CUlaunchAttribute> attributes, flatbuffers::FlatBufferBuilder& builder,
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::LaunchAttribute>>>* encoded);

}  // namespace curelay::frontend
