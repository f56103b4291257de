// What a driver table stub was asked, in order, for tests of the executor's state objects: each stub (a lambda
// without captures, as the table holds plain function pointers) appends one line.
#pragma once

#include <string>
#include <vector>

namespace curelay::executor {

inline std::vector<std::string>& RecordedCalls() {
  static std::vector<std::string> calls;
  return calls;
}

}  // namespace curelay::executor
