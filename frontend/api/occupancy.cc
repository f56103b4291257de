// Occupancy queries: answered by the executor's driver, which knows the function's resource use.
#include <algorithm>
#include <vector>

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
  const std::vector<uint64_t>* dynamic_smem_by_block_size = nullptr;
};

CUresult AskOccupancy(CUfunction function, const OccupancyRequest& request, ReplyMessage* reply) {
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
  flatbuffers::Offset<flatbuffers::Vector<uint64_t>> smem_table;
  if (request.dynamic_smem_by_block_size != nullptr) smem_table = builder.CreateVector(*request.dynamic_smem_by_block_size);
  const auto call = wire::CreateOccupancy(builder, request.query, function->id, request.block_size,
                                          request.num_blocks, dynamic_smem, request.flags, grid[0], grid[1],
                                          grid[2], block[0], block[1], block[2], attributes, smem_table)
                        .Union();
  return client->Call(builder, wire::Call::Occupancy, call, {}, reply);
}

// The plain questions (no launch configuration) have one answer per function and configuration epoch: kept in the
// function, so a library asking before every launch costs one round trip, not one per launch.
CUresult AskOccupancy(CUfunction function, const OccupancyRequest& request, int64_t* value) {
  Client* client = Client::Get();
  // The CUDA runtime passes library kernels (CUkernel) where functions go: their function in this context holds
  // the answers.
  if (client != nullptr && function != nullptr && !client->functions.Contains(function) &&
      client->kernels.Contains(reinterpret_cast<CUkernel>(function)) && CurrentContext() != nullptr) {
    CURELAY_RETURN_IF_ERROR(KernelFunction(*client, reinterpret_cast<CUkernel>(function), &function));
  }
  const bool plain = request.config == nullptr && request.dynamic_smem_by_block_size == nullptr && client != nullptr &&
                     function != nullptr && client->functions.Contains(function);
  const std::array<uint64_t, 5> question = {static_cast<uint64_t>(request.query),
                                            static_cast<uint64_t>(request.block_size),
                                            static_cast<uint64_t>(request.num_blocks), request.dynamic_smem_bytes,
                                            request.flags};
  const uint64_t epoch = client != nullptr ? client->configuration_epoch() : 0;
  if (plain && CurrentContext() != nullptr) {
    std::lock_guard<std::mutex> lock(function->attributes_mutex);
    if (auto found = function->occupancy.find(question);
        found != function->occupancy.end() && found->second.first == epoch) {
      *value = found->second.second;
      return CUDA_SUCCESS;
    }
  }
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(AskOccupancy(function, request, &reply));
  const auto* answer = reply.reply->body_as_IntegerValue();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  *value = answer->value();
  if (plain) {
    std::lock_guard<std::mutex> lock(function->attributes_mutex);
    function->occupancy[question] = {epoch, *value};
  }
  return CUDA_SUCCESS;
}

// The driver asks the application's function for the dynamic shared memory of the block sizes it tries; it runs
// here, once for every block size up to the limit, and the executor's driver gets the table.
CUresult PotentialBlockSize(int* min_grid_size, int* block_size, CUfunction function,
                            CUoccupancyB2DSize dynamic_smem_of, size_t dynamic_smem_bytes, int block_size_limit,
                            unsigned int flags) {
  if (min_grid_size == nullptr || block_size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  OccupancyRequest request{wire::OccupancyQuery::MaxPotentialBlockSize, block_size_limit, 0, dynamic_smem_bytes,
                           flags};
  std::vector<uint64_t> table;
  if (dynamic_smem_of != nullptr) {
    Client* client;
    CURELAY_RETURN_IF_ERROR(RequireContext(&client));
    const auto& attributes = client->devices()[CurrentContext()->device].attributes;
    int most = attributes.size() > CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
                   ? attributes[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK]
                   : 1024;
    if (block_size_limit > 0) most = std::min(most, block_size_limit);
    for (int threads = 1; threads <= most; ++threads) table.push_back(dynamic_smem_of(threads));
    request.dynamic_smem_by_block_size = &table;
  }
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(AskOccupancy(function, request, &reply));
  const auto* answer = reply.reply->body_as_BlockSizeSuggestion();
  if (answer == nullptr) return CUDA_ERROR_UNKNOWN;
  *min_grid_size = answer->min_grid_size();
  *block_size = answer->block_size();
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

CUresult cuOccupancyMaxPotentialBlockSize(int* min_grid_size, int* block_size, CUfunction function,
                                          CUoccupancyB2DSize dynamic_smem_of, size_t dynamic_smem_bytes,
                                          int block_size_limit) {
  return PotentialBlockSize(min_grid_size, block_size, function, dynamic_smem_of, dynamic_smem_bytes,
                            block_size_limit, CU_OCCUPANCY_DEFAULT);
}

CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* min_grid_size, int* block_size, CUfunction function,
                                                   CUoccupancyB2DSize dynamic_smem_of, size_t dynamic_smem_bytes,
                                                   int block_size_limit, unsigned int flags) {
  return PotentialBlockSize(min_grid_size, block_size, function, dynamic_smem_of, dynamic_smem_bytes,
                            block_size_limit, flags);
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
