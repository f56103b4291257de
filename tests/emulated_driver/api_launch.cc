// cuLaunchKernel: launch validation, parameter marshalling (kernelParams or
// the `extra` buffer) and submission of the emulated kernel.
#include <cstring>
#include <memory>
#include <vector>

#include "api_common.h"
#include "device_access.h"
#include "device_properties.h"
#include "graph.h"
#include "kernels.h"
#include "peer_access.h"

namespace emu = curelay::emulated;

namespace curelay::emulated {
namespace {

CUresult ValidateShape(const LaunchShape& s, const KernelInfo& k) {
  const Dim3& g = s.grid;
  const Dim3& b = s.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (g.x > kMaxGridDim[0] || g.y > kMaxGridDim[1] || g.z > kMaxGridDim[2] ||
      b.x > kMaxBlockDim[0] || b.y > kMaxBlockDim[1] || b.z > kMaxBlockDim[2]) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (threads > static_cast<uint64_t>(kMaxThreadsPerBlock)) return CUDA_ERROR_INVALID_VALUE;
  if (k.max_threads_per_block != 0 && threads > k.max_threads_per_block) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (k.required_block[0] != 0 &&
      (b.x != k.required_block[0] || b.y != k.required_block[1] || b.z != k.required_block[2])) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// Packs the arguments into the parameter buffer layout of `k`.
CUresult MarshalParams(const KernelInfo& k, void** kernel_params, void** extra,
                       std::vector<uint8_t>* buffer) {
  if (kernel_params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  buffer->assign(k.param_bytes, 0);
  if (kernel_params != nullptr) {
    for (size_t i = 0; i < k.params.size(); ++i) {
      if (kernel_params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(buffer->data() + k.params[i].offset, kernel_params[i], k.params[i].size);
    }
    return CUDA_SUCCESS;
  }
  const void* arg_buffer = nullptr;
  const size_t* arg_size = nullptr;
  if (extra != nullptr) {
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        arg_buffer = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        arg_size = static_cast<const size_t*>(extra[i + 1]);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (arg_size != nullptr && *arg_size != 0 && arg_buffer == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (k.param_bytes == 0) return CUDA_SUCCESS;  // a kernel without parameters needs neither form
  // The buffer only counts together with its size, and must cover the layout.
  if (arg_buffer == nullptr || arg_size == nullptr || *arg_size < k.param_bytes) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memcpy(buffer->data(), arg_buffer, k.param_bytes);
  return CUDA_SUCCESS;
}

// The device work of a launch of `handle` in `ctx`, checked and with its arguments copied.
CUresult KernelOp(CUfunction handle, const LaunchShape& shape, unsigned int shared_bytes,
                  const std::shared_ptr<Context>& ctx, void** kernel_params, void** extra,
                  std::function<CUresult()>* op_out) {
  std::shared_ptr<Function> f;
  if (CUresult r = LookupFunction(handle, &f); r != CUDA_SUCCESS) return r;
  // A CUfunction belongs to the context its module was loaded in.
  if (f->module->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = ValidateShape(shape, *f->info); r != CUDA_SUCCESS) return r;
  // Without cuFuncSetAttribute the default dynamic shared memory limit holds.
  const int opted_in = f->max_dynamic_shared.load();
  const uint64_t allowed = opted_in >= 0 ? uint64_t(opted_in) + f->info->static_shared_bytes
                                         : static_cast<uint64_t>(kDefaultMaxSharedPerBlock);
  if (uint64_t{shared_bytes} + f->info->static_shared_bytes > allowed) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint8_t> params;
  if (CUresult r = MarshalParams(*f->info, kernel_params, extra, &params); r != CUDA_SUCCESS) {
    return r;
  }
  if (f->binding == nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // no host implementation
  f->loaded = true;  // a launch loads a lazily loaded function
  // The memory the kernel may touch: its device's, or every device's once peer access reaches them all.
  const int device = PeerAccessCoversEveryDevice(*ctx) ? -1 : ctx->device;
  *op_out = [f, params = std::move(params), shape, device] {
    Driver& driver = Driver::Get();
    DeviceAccess memory(driver.memory(), driver.host(), device);
    KernelArgs args(*f->info, params);
    KernelContext k{shape, args, memory, f->module->global_addresses};
    return f->binding->fn(k);
  };
  return CUDA_SUCCESS;
}

CUresult Launch(CUfunction handle, const LaunchShape& shape, unsigned int shared_bytes,
                CUstream stream_handle, void** kernel_params, void** extra) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(stream_handle, &ctx, &stream); r != CUDA_SUCCESS) return r;
  std::function<CUresult()> op;
  if (CUresult r = KernelOp(handle, shape, shared_bytes, ctx, kernel_params, extra, &op); r != CUDA_SUCCESS) {
    return r;
  }
  // What the node answers if the launch is captured.
  NodeRecord record;
  std::shared_ptr<Function> f;
  if (LookupFunction(handle, &f) == CUDA_SUCCESS &&
      MarshalParams(*f->info, kernel_params, extra, &record.arguments) == CUDA_SUCCESS) {
    for (const auto& param : f->info->params) record.argument_offsets.push_back(param.offset);
    record.kernel.func = handle;
    record.kernel.gridDimX = shape.grid.x;
    record.kernel.gridDimY = shape.grid.y;
    record.kernel.gridDimZ = shape.grid.z;
    record.kernel.blockDimX = shape.block.x;
    record.kernel.blockDimY = shape.block.y;
    record.kernel.blockDimZ = shape.block.z;
    record.kernel.sharedMemBytes = shared_bytes;
  }
  bool captured = false;
  if (CUresult r = CaptureOp(ctx, stream.get(), CU_GRAPH_NODE_TYPE_KERNEL, op, &captured, &record);
      r != CUDA_SUCCESS || captured) {
    return r;
  }
  SubmitOp(ctx, stream.get(), std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace curelay::emulated

extern "C" {

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void** kernelParams, void** extra) {
  return emu::Guard([&] {
    const emu::LaunchShape shape{{gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}};
    return emu::Launch(f, shape, sharedMemBytes, hStream, kernelParams, extra);
  });
}

// A kernel node: checked and its arguments copied now, as the driver does; `func` only (no CUkernel), in the
// current context. `record`: the parameters GetParams answers, the arguments packed by the function's layout.
static CUresult KernelNodeOp(const CUDA_KERNEL_NODE_PARAMS* nodeParams, std::function<CUresult()>* op,
                             emu::NodeRecord* record) {
  if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodeParams->func == nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // library kernels in nodes: not emulated
  std::shared_ptr<emu::Context> ctx;
  if (CUresult r = emu::CurrentContext(&ctx); r != CUDA_SUCCESS) return r;
  const emu::LaunchShape shape{{nodeParams->gridDimX, nodeParams->gridDimY, nodeParams->gridDimZ},
                               {nodeParams->blockDimX, nodeParams->blockDimY, nodeParams->blockDimZ}};
  if (CUresult r = emu::KernelOp(nodeParams->func, shape, nodeParams->sharedMemBytes, ctx, nodeParams->kernelParams,
                                 nodeParams->extra, op);
      r != CUDA_SUCCESS) {
    return r;
  }
  std::shared_ptr<emu::Function> f;
  if (CUresult r = emu::LookupFunction(nodeParams->func, &f); r != CUDA_SUCCESS) return r;
  if (CUresult r = emu::MarshalParams(*f->info, nodeParams->kernelParams, nodeParams->extra, &record->arguments);
      r != CUDA_SUCCESS) {
    return r;
  }
  for (const auto& param : f->info->params) record->argument_offsets.push_back(param.offset);
  record->kernel = *nodeParams;
  record->kernel.kern = nullptr;
  record->kernel.ctx = nullptr;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    emu::NodeRecord record;
    if (CUresult r = KernelNodeOp(nodeParams, &op, &record); r != CUDA_SUCCESS) return r;
    return emu::AddGraphNode(hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_KERNEL, std::move(op),
                             phGraphNode, &record);
  });
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    emu::NodeRecord record;
    if (CUresult r = KernelNodeOp(nodeParams, &op, &record); r != CUDA_SUCCESS) return r;
    return emu::SetExecNodeOp(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_KERNEL, std::move(op));
  });
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    std::function<CUresult()> op;
    emu::NodeRecord record;
    if (CUresult r = KernelNodeOp(nodeParams, &op, &record); r != CUDA_SUCCESS) return r;
    return emu::SetGraphNodeOp(hNode, CU_GRAPH_NODE_TYPE_KERNEL, std::move(op), std::move(record));
  });
}

// kernelParams point into the node's own copy of the arguments; extra is null.
CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
    emu::NodeRecord* record = nullptr;
    if (CUresult r = emu::GraphNodeRecord(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &record); r != CUDA_SUCCESS) return r;
    *nodeParams = record->kernel;
    return CUDA_SUCCESS;
  });
}

// Attributes are kept per node (unset ones read as zero); those of launches only (events) are refused.
CUresult CUDAAPI cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               const CUkernelNodeAttrValue* value) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (value == nullptr || attr == CU_LAUNCH_ATTRIBUTE_IGNORE || attr == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ||
        attr == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT || attr > CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    emu::NodeRecord* record = nullptr;
    if (CUresult r = emu::GraphNodeRecord(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &record); r != CUDA_SUCCESS) return r;
    record->attributes[attr] = *value;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               CUkernelNodeAttrValue* value_out) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    if (value_out == nullptr || attr == CU_LAUNCH_ATTRIBUTE_IGNORE || attr > CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    emu::NodeRecord* record = nullptr;
    if (CUresult r = emu::GraphNodeRecord(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &record); r != CUDA_SUCCESS) return r;
    const auto found = record->attributes.find(attr);
    *value_out = found != record->attributes.end() ? found->second : CUkernelNodeAttrValue{};
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) {
  return emu::Guard([&] {
    if (CUresult r = emu::CheckInit(); r != CUDA_SUCCESS) return r;
    emu::NodeRecord* to = nullptr;
    emu::NodeRecord* from = nullptr;
    if (CUresult r = emu::GraphNodeRecord(dst, CU_GRAPH_NODE_TYPE_KERNEL, &to); r != CUDA_SUCCESS) return r;
    if (CUresult r = emu::GraphNodeRecord(src, CU_GRAPH_NODE_TYPE_KERNEL, &from); r != CUDA_SUCCESS) return r;
    to->attributes = from->attributes;
    return CUDA_SUCCESS;
  });
}

}  // extern "C"
