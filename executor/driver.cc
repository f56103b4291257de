#include "executor/driver.h"

#include <dlfcn.h>

#include "common/shim_identity.h"

#define CURELAY_STRINGIFY_EXPANDED(name) #name
#define CURELAY_ABI_NAME(name) CURELAY_STRINGIFY_EXPANDED(name)

namespace curelay::executor {

bool Driver::Load(const std::string& path, std::string* error) {
  if (FileCarriesMarker(path, kShimIdentity)) {
    *error = path + " is the curelay shim, not a CUDA driver; refusing to load it";
    return false;
  }
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    *error = std::string("dlopen: ") + dlerror();
    return false;
  }
#define CURELAY_DRIVER_FUNCTION(name)                                                   \
  name = reinterpret_cast<decltype(name)>(dlsym(handle_, CURELAY_ABI_NAME(name)));      \
  if (name == nullptr) {                                                                \
    *error = path + " lacks " CURELAY_ABI_NAME(name);                                   \
    return false;                                                                       \
  }
#include "executor/driver_functions.inc"
#undef CURELAY_DRIVER_FUNCTION
#define CURELAY_DRIVER_FUNCTION(name) \
  name = reinterpret_cast<decltype(name)>(dlsym(handle_, CURELAY_ABI_NAME(name)));
#include "executor/driver_functions_optional.inc"
#undef CURELAY_DRIVER_FUNCTION
  cuTexRefSetAddress2D_v2 =
      reinterpret_cast<decltype(cuTexRefSetAddress2D_v2)>(dlsym(handle_, "cuTexRefSetAddress2D_v2"));
  return true;
}

}  // namespace curelay::executor
