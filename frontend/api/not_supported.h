// Fallback for driver entry points curelay does not implement.
//
// Every name the real libcuda.so.1 exports has a generated weak stub
// (build/.../generated/driver_stubs.cc, see frontend/codegen/README.md) whose
// body is `return ReportNotSupported(<index in the driver symbol table>);`.
//
// This header is included by that generated file, which must not see cuda.h
// (its macros would rename the stubs), so it deliberately does not include
// cuda.h and returns the CUresult as a plain int.
#pragma once

#include <cstddef>

namespace curelay::frontend {

// Writes "curelay: <name> is not supported\n" to stderr the first time it is
// called for a given index (one write(2), no allocation, no locks; errno is
// preserved) and returns CUDA_ERROR_NOT_SUPPORTED (801) as an int.  CUresult is
// an int-sized enum, so the value can be returned from a stub in place of a
// CUresult.  An out-of-range index is reported as "entry point #<index>".
int ReportNotSupported(std::size_t index) noexcept;

}  // namespace curelay::frontend
