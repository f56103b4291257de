// The texture and surface references of a session (handlers_texture_references.cc): the driver's handles, by the
// client's id. A module's references go with the module (unload, its library's unload) or when the client destroys
// them; those of cuTexRefCreate when the client destroys them or the session ends. All of a context's go when it
// ends (a module's belong to the module's context): the driver frees them with it, and a handle kept past that
// would reach the driver freed (the H200's driver crashes on one).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <unordered_map>

#include "executor/driver.h"

namespace curelay::executor {

class TextureReferences {
 public:
  struct Reference {
    void* handle = nullptr;  // CUtexref or CUsurfref
    bool surface = false;
    uint64_t module_id = 0;  // 0: made by cuTexRefCreate
    CUcontext context = nullptr;
  };

  void Add(uint64_t id, const Reference& reference) { references_[id] = reference; }
  // The reference `id` of that kind, or null.
  void* Find(uint64_t id, bool surface) const {
    const auto found = references_.find(id);
    return found != references_.end() && found->second.surface == surface ? found->second.handle : nullptr;
  }
  // Removes the texture reference `id` (a module's or a created one); false if `id` names none.
  bool RemoveTexture(uint64_t id) {
    const auto found = references_.find(id);
    if (found == references_.end() || found->second.surface) return false;
    references_.erase(found);
    return true;
  }
  void ForgetModule(uint64_t module_id) {
    std::erase_if(references_, [&](const auto& entry) { return entry.second.module_id == module_id; });
  }
  void ForgetContext(CUcontext context) {
    std::erase_if(references_, [&](const auto& entry) { return entry.second.context == context; });
  }
  void Release(Driver& driver) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    for (const auto& [id, reference] : references_) {
      if (reference.module_id == 0 && !reference.surface && driver.cuTexRefDestroy != nullptr) {
        driver.cuTexRefDestroy(static_cast<CUtexref>(reference.handle));
      }
    }
#pragma GCC diagnostic pop
    references_.clear();
  }

 private:
  std::unordered_map<uint64_t, Reference> references_;
};

}  // namespace curelay::executor
