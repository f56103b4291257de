// Occupancy queries: answered by the executor's driver, which knows the function's resource use.
#include "frontend/api/api_support.h"
#include "frontend/api/library_kernels.h"
#include "frontend/launch/launch_attributes.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

struct OccupancyRequest {
  wire::OccupancyQuery query;
  int block_size = 0;
  int num_blocks = 0;
  size_t dynamic_smem_bytes = 0;
  unsigned int flags = 0;
  const CUlaunchConfig* config = nullptr;
};

CUresult AskOccupancy(CUfunction function, const OccupancyRequest& request, int64_t* value) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!client->functions.Contains(function)) {
    const auto kernel = reinterpret_cast<CUkernel>(function);
    if (!client->kernels.Contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
    CURELAY_RETURN_IF_ERROR(KernelFunction(*client, kernel, &function));
  }
  auto& builder = Builder();
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::LaunchAttribute>>> attributes;
  uint32_t grid[3] = {}, block[3] = {};
  size_t dynamic_smem = request.dynamic_smem_bytes;
  if (request.config != nullptr) {
    const CUlaunchConfig& config = *request.config;
    if (config.numAttrs != 0) {
      if (config.attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
      CURELAY_RETURN_IF_ERROR(EncodeLaunchAttributes(*client, {config.attrs, config.numAttrs}, builder, &attributes));
    }
    grid[0] = config.gridDimX, grid[1] = config.gridDimY, grid[2] = config.gridDimZ;
    block[0] = config.blockDimX, block[1] = config.blockDimY, block[2] = config.blockDimZ;
    dynamic_smem = config.sharedMemBytes;
  }
  const auto call = wire::CreateOccupancy(builder, request.query, function->id, request.block_size,
                                          request.num_blocks, dynamic_smem, request.flags, grid[0], grid[1],
                                          grid[2], block[0], block[1], block[2], attributes)
                        .Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client->Call(builder, wire::Call::Occupancy, call, {}, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  *value = answer->value();
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction function, int block_size,
                                                              size_t dynamic_smem_bytes, unsigned int flags) {
  if (blocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int64_t value = 0;
  CURELAY_RETURN_IF_ERROR(AskOccupancy(
      function, {wire::OccupancyQuery::MaxActiveBlocksPerMultiprocessor, block_size, 0, dynamic_smem_bytes, flags},
      &value));
  *blocks = static_cast<int>(value);
  return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction function, int block_size,
                                                     size_t dynamic_smem_bytes) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, block_size, dynamic_smem_bytes,
                                                              CU_OCCUPANCY_DEFAULT);
}

CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, CUfunction function, int num_blocks,
                                                 int block_size) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int64_t value = 0;
  CURELAY_RETURN_IF_ERROR(AskOccupancy(
      function, {wire::OccupancyQuery::AvailableDynamicSMemPerBlock, block_size, num_blocks}, &value));
  *bytes = static_cast<size_t>(value);
  return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveClusters(int* clusters, CUfunction function, const CUlaunchConfig* config) {
  if (clusters == nullptr || config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  OccupancyRequest request{wire::OccupancyQuery::MaxActiveClusters};
  request.config = config;
  int64_t value = 0;
  CURELAY_RETURN_IF_ERROR(AskOccupancy(function, request, &value));
  *clusters = static_cast<int>(value);
  return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialClusterSize(int* cluster_size, CUfunction function, const CUlaunchConfig* config) {
  if (cluster_size == nullptr || config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  OccupancyRequest request{wire::OccupancyQuery::MaxPotentialClusterSize};
  request.config = config;
  int64_t value = 0;
  CURELAY_RETURN_IF_ERROR(AskOccupancy(function, request, &value));
  *cluster_size = static_cast<int>(value);
  return CUDA_SUCCESS;
}

}  // extern "C"
