// The texture and surface objects of a session (handlers_texture_objects.cc): each is the executor driver's own
// object, whose value the client holds; destroyed when the client destroys it or the session ends.
#pragma once

#include <cuda.h>

#include <unordered_set>

#include "executor/driver.h"

namespace curelay::executor {

class TextureObjects {
 public:
  void Add(unsigned long long object, bool surface) { (surface ? surfaces_ : textures_).insert(object); }
  // Forgets `object`; false if this session made no such object of that kind.
  bool Remove(unsigned long long object, bool surface) { return (surface ? surfaces_ : textures_).erase(object) != 0; }
  // Before the arrays and memory they read go.
  void Release(Driver& driver) {
    if (driver.cuTexObjectDestroy != nullptr) {
      for (unsigned long long object : textures_) driver.cuTexObjectDestroy(object);
    }
    if (driver.cuSurfObjectDestroy != nullptr) {
      for (unsigned long long object : surfaces_) driver.cuSurfObjectDestroy(object);
    }
    textures_.clear();
    surfaces_.clear();
  }

 private:
  std::unordered_set<unsigned long long> textures_;
  std::unordered_set<unsigned long long> surfaces_;
};

}  // namespace curelay::executor
