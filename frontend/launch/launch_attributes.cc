#include "frontend/launch/launch_attributes.h"

#include "frontend/client/client.h"
#include "frontend/client/log.h"

namespace curelay::frontend {

CUresult EncodeLaunchAttributes(
    Client& client, std::span<const CUlaunchAttribute> attributes, flatbuffers::FlatBufferBuilder& builder,
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::LaunchAttribute>>>* encoded) {
  std::vector<flatbuffers::Offset<wire::LaunchAttribute>> entries;
  entries.reserve(attributes.size());
  for (const CUlaunchAttribute& attribute : attributes) {
    uint64_t event_id = 0;
    switch (attribute.id) {
      case CU_LAUNCH_ATTRIBUTE_IGNORE:
        continue;
      case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
        Log().warn("launch attribute CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE is not supported");
        return CUDA_ERROR_NOT_SUPPORTED;
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
      case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: {
        // Both values start with the CUevent.
        const CUevent event = attribute.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT
                                  ? attribute.value.programmaticEvent.event
                                  : attribute.value.launchCompletionEvent.event;
        if (event == nullptr || !client.events.Contains(event)) return CUDA_ERROR_INVALID_HANDLE;
        event_id = event->id;
        break;
      }
      default:
        break;
    }
    const auto value = builder.CreateVector(reinterpret_cast<const uint8_t*>(&attribute.value),
                                            sizeof(attribute.value));
    entries.push_back(wire::CreateLaunchAttribute(builder, attribute.id, value, event_id));
  }
  *encoded = builder.CreateVector(entries);
  return CUDA_SUCCESS;
}

}  // namespace curelay::frontend
