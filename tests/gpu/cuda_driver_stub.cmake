# Shared by tests/gpu and bench: how a GPU program links the CUDA driver API without the CUDA language.
#
# Programs link the toolkit's stub libcuda.so (soname libcuda.so.1), so the executable records only
# DT_NEEDED libcuda.so.1 and the runtime loader picks whichever libcuda.so.1 comes first on
# LD_LIBRARY_PATH: the real driver (native run) or build/frontend (through curelay).
# The build RPATH is skipped so it can never point at the stubs directory.
include_guard(DIRECTORY)  # per directory: find_package targets are directory-scoped

set(CURELAY_CUDA_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root (headers and the driver stub)")
set(CURELAY_CUDA_DRIVER_STUB "${CURELAY_CUDA_ROOT}/lib64/stubs/libcuda.so" CACHE FILEPATH
    "Stub libcuda.so the GPU test programs link against (never loaded at run time)")

if(NOT EXISTS "${CURELAY_CUDA_ROOT}/include/cuda.h")
  message(FATAL_ERROR "cuda.h not found under ${CURELAY_CUDA_ROOT}/include (set CURELAY_CUDA_ROOT)")
endif()
if(NOT EXISTS "${CURELAY_CUDA_DRIVER_STUB}")
  message(FATAL_ERROR "CUDA driver stub not found: ${CURELAY_CUDA_DRIVER_STUB}")
endif()

find_package(Threads REQUIRED)

# curelay_gpu_program(<target> <sources>...): a C++20 executable that calls the driver API only.
function(curelay_gpu_program target)
  add_executable(${target} ${ARGN})
  target_compile_features(${target} PRIVATE cxx_std_20)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF SKIP_BUILD_RPATH ON INSTALL_RPATH "")
  target_include_directories(${target} SYSTEM PRIVATE "${CURELAY_CUDA_ROOT}/include")
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  target_link_libraries(${target} PRIVATE "${CURELAY_CUDA_DRIVER_STUB}" Threads::Threads ${CMAKE_DL_LIBS})
endfunction()
