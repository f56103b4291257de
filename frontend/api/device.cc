// Device enumeration and properties, all answered from what the client learned at cuInit (no round trip).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>

#include "frontend/api/api_support.h"

using namespace curelay::frontend;

namespace {

CUresult Attribute(Client& client, CUdevice device, CUdevice_attribute attribute, int* value) {
  const auto& info = client.devices()[device];
  if (attribute <= 0 || static_cast<size_t>(attribute) >= info.attributes.size()) return CUDA_ERROR_INVALID_VALUE;
  CUresult result;
  if (!curelay::WireEnum(info.attribute_results[attribute], CUDA_ERROR_UNKNOWN, &result)) return CUDA_ERROR_UNKNOWN;
  if (result == CUDA_SUCCESS) *value = info.attributes[attribute];
  return result;
}

// cuda.h's forms: domain:bus:device.function, domain:bus:device, bus:device.function (all hexadecimal).
bool ParsePciBusId(const char* text, unsigned long* domain, unsigned long* bus, unsigned long* slot) {
  unsigned long fields[4] = {};
  char separators[4] = {};
  int count = 0;
  for (;;) {
    if (count == 4) return false;
    unsigned long value = 0;
    int digits = 0;
    for (; std::isxdigit(static_cast<unsigned char>(*text)); ++text) {
      if (++digits > 8) return false;
      const int c = std::tolower(static_cast<unsigned char>(*text));
      value = value * 16 + static_cast<unsigned long>(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    if (digits == 0) return false;
    fields[count] = value;
    separators[count++] = *text;
    if (*text == '\0') break;
    if (*text != ':' && *text != '.') return false;
    ++text;
  }
  const std::string pattern(separators, count);
  if (pattern == std::string("::.\0", 4) || pattern == std::string("::\0", 3)) {
    *domain = fields[0], *bus = fields[1], *slot = fields[2];
    return true;
  }
  if (pattern == std::string(":.\0", 3)) {
    *domain = 0, *bus = fields[0], *slot = fields[1];
    return true;
  }
  return false;
}

}  // namespace

extern "C" {

CUresult cuDeviceGetCount(int* count) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(client->devices().size());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, ordinal));
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  const std::string& full = client->devices()[device].name;
  const size_t copied = std::min(full.size(), static_cast<size_t>(length - 1));
  std::memcpy(name, full.data(), copied);
  name[copied] = '\0';
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  *uuid = client->devices()[device].uuid;
  return CUDA_SUCCESS;
}

// The pre-11.4 symbol: same answer (the difference was only in MIG handling, which the backend already did).
CUresult cuDeviceGetUuid_v1(CUuuid* uuid, CUdevice device) __asm__("cuDeviceGetUuid");
CUresult cuDeviceGetUuid_v1(CUuuid* uuid, CUdevice device) { return cuDeviceGetUuid_v2(uuid, device); }

CUresult cuDeviceTotalMem(size_t* bytes, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  *bytes = client->devices()[device].total_memory;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  return Attribute(*client, device, attribute, value);
}

CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  CURELAY_RETURN_IF_ERROR(Attribute(*client, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, major));
  return Attribute(*client, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, minor);
}

CUresult cuDeviceGetProperties(CUdevprop* properties, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (properties == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  const auto get = [&](CUdevice_attribute attribute) {
    int value = 0;
    Attribute(*client, device, attribute, &value);
    return value;
  };
  properties->maxThreadsPerBlock = get(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  properties->maxThreadsDim[0] = get(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  properties->maxThreadsDim[1] = get(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  properties->maxThreadsDim[2] = get(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  properties->maxGridSize[0] = get(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  properties->maxGridSize[1] = get(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  properties->maxGridSize[2] = get(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  properties->sharedMemPerBlock = get(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  properties->totalConstantMemory = get(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  properties->SIMDWidth = get(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  properties->memPitch = get(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  properties->regsPerBlock = get(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  properties->clockRate = get(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  properties->textureAlign = get(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* bus_id, int length, CUdevice device) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (bus_id == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  CURELAY_RETURN_IF_ERROR(RequireDevice(*client, device));
  int domain = 0, bus = 0, slot = 0;
  CURELAY_RETURN_IF_ERROR(Attribute(*client, device, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &domain));
  CURELAY_RETURN_IF_ERROR(Attribute(*client, device, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &bus));
  CURELAY_RETURN_IF_ERROR(Attribute(*client, device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, &slot));
  // The bus id of the GPU on the backend host, in the driver's format.
  std::snprintf(bus_id, static_cast<size_t>(length), "%04x:%02x:%02x.0", domain, bus, slot);
  return CUDA_SUCCESS;
}

// Matched against the PCI location of each device learned at cuInit (the GPUs of the backend host).
CUresult cuDeviceGetByPCIBusId(CUdevice* device, const char* bus_id) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireClient(&client));
  if (device == nullptr || bus_id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned long domain = 0, bus = 0, slot = 0;
  if (!ParsePciBusId(bus_id, &domain, &bus, &slot)) return CUDA_ERROR_INVALID_VALUE;
  for (CUdevice candidate = 0; candidate < static_cast<int>(client->devices().size()); ++candidate) {
    int candidate_domain = 0, candidate_bus = 0, candidate_slot = 0;
    if (Attribute(*client, candidate, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &candidate_domain) != CUDA_SUCCESS ||
        Attribute(*client, candidate, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &candidate_bus) != CUDA_SUCCESS ||
        Attribute(*client, candidate, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, &candidate_slot) != CUDA_SUCCESS) {
      continue;
    }
    if (static_cast<unsigned long>(candidate_domain) == domain && static_cast<unsigned long>(candidate_bus) == bus &&
        static_cast<unsigned long>(candidate_slot) == slot) {
      *device = candidate;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

}  // extern "C"
