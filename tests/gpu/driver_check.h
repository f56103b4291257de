// Error checking shared by the GPU acceptance test and the driver benchmark (driver API only).
//
// CU_CHECK(call) evaluates a driver call; on anything but CUDA_SUCCESS it prints the call text,
// file:line and the error's name to stderr and throws curelay_gpu::DriverError, so a caller can end
// one test case (and move on to the next) or the whole program.
#pragma once

#include <cuda.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace curelay_gpu {

inline std::string error_name(CUresult code) {
  const char* name = nullptr;
  if (cuGetErrorName(code, &name) != CUDA_SUCCESS || name == nullptr) {
    return "CUresult(" + std::to_string(static_cast<int>(code)) + ")";
  }
  return name;
}

class DriverError : public std::runtime_error {
 public:
  DriverError(CUresult code, const char* call, const char* file, int line)
      : std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           error_name(code)),
        code_(code),
        call_(call) {}
  CUresult code() const { return code_; }
  const std::string& call() const { return call_; }

 private:
  CUresult code_;
  std::string call_;
};

inline void check_driver(CUresult code, const char* call, const char* file, int line) {
  if (code == CUDA_SUCCESS) return;
  std::fprintf(stderr, "%s:%d: %s -> %s (%d)\n", file, line, call, error_name(code).c_str(), static_cast<int>(code));
  throw DriverError(code, call, file, line);
}

}  // namespace curelay_gpu

#define CU_CHECK(call) ::curelay_gpu::check_driver((call), #call, __FILE__, __LINE__)
