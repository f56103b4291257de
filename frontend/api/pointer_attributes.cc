// cuPointerGetAttribute(s): the client's own pinned host allocations are described locally; any other pointer is
// asked of the executor, which answers only for this session's device allocations (an unknown pointer gets the
// driver's answer for an unknown pointer). cuPointerSetAttribute is the executor driver's.
#include <cstring>
#include <vector>

#include "common/pointer_attribute_width.h"
#include "frontend/api/api_support.h"
#include "frontend/client/log.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

// Writes an attribute's value with the width the driver writes it (little-endian: the low bytes).
void Store(void* data, CUpointer_attribute attribute, uint64_t value) {
  std::memcpy(data, &value, PointerAttributeWidth(attribute));
}

// A pinned host allocation of this client, as the driver describes page-locked host memory.
// Managed memory (one address on both sides) is described as the driver describes managed allocations: device
// memory that is managed.
CUresult DescribeHostAllocation(Client& client, unsigned int count, CUpointer_attribute* attributes, void** data,
                                const char* base, size_t bytes, CUdeviceptr ptr) {
  const bool managed = client.host_allocations.Managed(reinterpret_cast<const void*>(ptr));
  for (unsigned int i = 0; i < count; ++i) {
    void* out = data[i];
    const CUpointer_attribute attribute = attributes[i];
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_CONTEXT: Store(out, attribute, reinterpret_cast<uint64_t>(CurrentContext())); break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: Store(out, attribute, managed ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST); break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER: Store(out, attribute, ptr); break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED: Store(out, attribute, managed ? 1 : 0); break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        Store(out, attribute, CurrentContext() != nullptr ? static_cast<uint32_t>(CurrentContext()->device) : 0);
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: Store(out, attribute, reinterpret_cast<CUdeviceptr>(base)); break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE: Store(out, attribute, bytes); break;
      case CU_POINTER_ATTRIBUTE_MAPPED: Store(out, attribute, 1); break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: {
        // Only mapped host memory has a device address; the driver reports the others as not mapped.
        CUdeviceptr device_ptr = 0;
        CURELAY_RETURN_IF_ERROR(client.host_allocations.DevicePointer(reinterpret_cast<const void*>(ptr), &device_ptr));
        Store(out, attribute, device_ptr);
        break;
      }
      default:
        Log().warn("cuPointerGetAttributes: attribute {} of pinned host memory is not supported",
                   static_cast<int>(attributes[i]));
        return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  return CUDA_SUCCESS;
}

// Any other pointer is asked of the executor: `single` for cuPointerGetAttribute, whose errors differ.
CUresult AskExecutor(Client& client, unsigned int count, const CUpointer_attribute* attributes, void** data,
                     CUdeviceptr ptr, bool single) {
  // No current context is needed: the driver describes any address (PyTorch asks whether a tensor is pinned from
  // its pin-memory thread before that thread has a context).
  auto& builder = Builder();
  const auto requested = builder.CreateVector(reinterpret_cast<const int32_t*>(attributes), count);
  const auto call = wire::CreatePointerAttributes(builder, ptr, requested, single).Union();
  ReplyMessage reply;
  CURELAY_RETURN_IF_ERROR(client.Call(builder, wire::Call::PointerAttributes, call, {}, &reply));
  const auto* answer = reply.reply->body_as_AttributeValues();
  if (answer == nullptr || answer->values() == nullptr || answer->values()->size() != count) {
    return CUDA_ERROR_UNKNOWN;
  }
  // Every value is checked before any is written: the answer states each width, and one that is not the width the
  // driver writes for that attribute (the application's variable is that big, no bigger) is a broken answer.
  for (unsigned int i = 0; i < count; ++i) {
    const uint32_t width = wire::StructAt(*answer->values(), i).bytes();
    if (width == 0 || width != PointerAttributeWidth(attributes[i])) {
      Log().error("cuPointerGetAttributes: the executor answered attribute {} with {} bytes; the driver writes {}",
                  static_cast<int>(attributes[i]), width, PointerAttributeWidth(attributes[i]));
      return CUDA_ERROR_UNKNOWN;
    }
  }
  for (unsigned int i = 0; i < count; ++i) {
    const wire::AttributeValue value = wire::StructAt(*answer->values(), i);
    if (attributes[i] == CU_POINTER_ATTRIBUTE_CONTEXT) {
      Store(data[i], attributes[i], reinterpret_cast<uint64_t>(client.contexts.FindById(value.context())));
      continue;
    }
    Store(data[i], attributes[i], value.value());
  }
  return CUDA_SUCCESS;
}

// The client's own pinned memory is described here; anything else is the executor's to answer (`single`: as the
// driver's cuPointerGetAttribute, whose errors differ from the plural form's).
CUresult Describe(Client& client, unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr,
                  bool single) {
  const char* base = nullptr;
  size_t bytes = 0;
  const bool own = client.host_allocations.Find(reinterpret_cast<const void*>(ptr), &base, &bytes);
  Log().debug("cuPointerGet{}({:#x}, {} attributes, first {}): {}", single ? "Attribute" : "Attributes", ptr, count,
              static_cast<int>(attributes[0]), own ? "pinned host memory of this client" : "asking the executor");
  if (own) return DescribeHostAllocation(client, count, attributes, data, base, bytes, ptr);
  return AskExecutor(client, count, attributes, data, ptr, single);
}

}  // namespace

extern "C" {

CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data, CUdeviceptr ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (count == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < count; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
  }
  return Describe(*client, count, attributes, data, ptr, /*single=*/false);
}

// Only CU_POINTER_ATTRIBUTE_SYNC_MEMOPS can be set (cuda.h; the driver refuses the others). The executor's driver
// sets it on the session's device memory, and on this client's page-locked memory at the address the executor maps
// it at (same host); over tcp:// that memory is the client's alone, and there is nothing to set it on. curelay's
// synchronous memsets and copies are posted, so the setting does not make them wait (docs/api-coverage.md).
CUresult cuPointerSetAttribute(const void* value, CUpointer_attribute attribute, CUdeviceptr ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (value == nullptr || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
  const char* base = nullptr;
  size_t bytes = 0;
  const bool host = client->host_allocations.Find(reinterpret_cast<const void*>(ptr), &base, &bytes);
  if (host && client->remote()) {
    Log().warn("cuPointerSetAttribute: page-locked memory of a remote session is not the GPU host's");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  // The executor's address of the client's page-locked memory (where it could not map it at the same one).
  CUdeviceptr target = ptr;
  if (host && !client->host_allocations.DeviceRange(reinterpret_cast<const void*>(ptr), 1, &target)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  unsigned int setting = 0;
  std::memcpy(&setting, value, sizeof(setting));
  auto& builder = Builder();
  const auto call = wire::CreatePointerSetAttribute(builder, target, attribute, setting, host).Union();
  return client->Call(builder, wire::Call::PointerSetAttribute, call, {}, nullptr);
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Describe(*client, 1, &attribute, &data, ptr, /*single=*/true);
}

}  // extern "C"
