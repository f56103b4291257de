// Error names and strings, answered locally: with the real driver's own texts once a session exists (so output
// matches a native run byte for byte), and from cuda.h's descriptions before that.
#include "frontend/api/api_support.h"

using namespace curelay::frontend;

namespace {

struct ErrorEntry {
  CUresult code;
  const char* name;
  const char* description;
};

constexpr ErrorEntry kErrors[] = {
#define CURELAY_CUDA_ERROR(name, value, description) {static_cast<CUresult>(value), #name, description},
#include "cuda_error_table.inc"
#undef CURELAY_CUDA_ERROR
};

CUresult Lookup(CUresult code, const char** name, const char** text) {
  if (const Client* client = Client::Get(); client != nullptr && client->ErrorText(code, name, text)) {
    return CUDA_SUCCESS;
  }
  for (const auto& entry : kErrors) {
    if (entry.code == code) {
      *name = entry.name;
      *text = entry.description;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

extern "C" {

CUresult cuGetErrorName(CUresult error, const char** result) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* name = nullptr;
  const char* text = nullptr;
  const CUresult found = Lookup(error, &name, &text);
  *result = found == CUDA_SUCCESS ? name : nullptr;
  return found;
}

CUresult cuGetErrorString(CUresult error, const char** result) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* name = nullptr;
  const char* text = nullptr;
  const CUresult found = Lookup(error, &name, &text);
  *result = found == CUDA_SUCCESS ? text : nullptr;
  return found;
}

}  // extern "C"
