# Build-time generation of libcuda.so.1 entry points (see README.md here).
#
# Usage (from frontend/CMakeLists.txt):
#
#   include(codegen/entry_points.cmake)
#   curelay_generate_entry_points(GEN)
#   add_library(cuda SHARED ${GEN_SOURCES} api/not_supported.cc api/...)
#   target_include_directories(cuda PRIVATE ${GEN_INCLUDE_DIR})
#   target_link_options(cuda PRIVATE ${GEN_LINK_OPTIONS})
#   set_property(TARGET cuda APPEND PROPERTY LINK_DEPENDS ${GEN_VERSION_SCRIPT})
#   curelay_check_driver_exports(cuda)   # optional post-link export check
#
# curelay_generate_entry_points(<prefix>
#     [CUDA_INCLUDE_DIR <dir>]     # default: CUDAToolkit_INCLUDE_DIRS, else /usr/local/cuda/include
#     [EXPORTS <driver_exports.txt>])  # default: frontend/driver_exports.txt
# sets in the caller's scope:
#   <prefix>                 the output directory (${CMAKE_CURRENT_BINARY_DIR}/generated)
#   <prefix>_SOURCES         generated driver_stubs.cc, driver_table.cc, driver_table.h
#                            and libcuda.map (add all of them to the shared library)
#   <prefix>_INCLUDE_DIR     directory holding driver_table.h
#   <prefix>_VERSION_SCRIPT  the generated GNU ld version script (libcuda.map)
#   <prefix>_LINK_OPTIONS    -Wl,--version-script=<map>;-Wl,-Bsymbolic-functions
#
# Must be called in the same directory as the add_library() that uses the
# sources (generated-file visibility and source properties are per directory).

find_package(Python3 REQUIRED COMPONENTS Interpreter)

set(CURELAY_CODEGEN_DIR "${CMAKE_CURRENT_LIST_DIR}")

function(curelay_generate_entry_points prefix)
  cmake_parse_arguments(ARG "" "CUDA_INCLUDE_DIR;EXPORTS" "" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "curelay_generate_entry_points: unexpected arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()

  set(codegen_dir "${CURELAY_CODEGEN_DIR}")
  get_filename_component(frontend_dir "${codegen_dir}" DIRECTORY)
  set(script "${codegen_dir}/gen_entry_points.py")

  if(NOT ARG_EXPORTS)
    set(ARG_EXPORTS "${frontend_dir}/driver_exports.txt")
  endif()
  if(NOT ARG_CUDA_INCLUDE_DIR)
    if(CUDAToolkit_INCLUDE_DIRS)
      set(ARG_CUDA_INCLUDE_DIR ${CUDAToolkit_INCLUDE_DIRS})
    else()
      set(ARG_CUDA_INCLUDE_DIR /usr/local/cuda/include)
    endif()
  endif()
  unset(cuda_h)
  foreach(dir IN LISTS ARG_CUDA_INCLUDE_DIR)
    if(NOT DEFINED cuda_h AND EXISTS "${dir}/cuda.h")
      set(cuda_h "${dir}/cuda.h")
      set(cuda_dir "${dir}")
    endif()
  endforeach()
  if(NOT DEFINED cuda_h)
    message(FATAL_ERROR "curelay_generate_entry_points: cuda.h not found in '${ARG_CUDA_INCLUDE_DIR}'")
  endif()

  # The interop headers carry the same API->ABI renaming macros for their
  # entry points (cuGLMapBufferObject -> cuGLMapBufferObject_v2[_ptds], ...).
  set(extra_args "")
  set(extra_headers "")
  foreach(h cudaGL.h cudaVDPAU.h cudaEGL.h cudaProfiler.h)
    if(EXISTS "${cuda_dir}/${h}")
      list(APPEND extra_args --extra-header "${cuda_dir}/${h}")
      list(APPEND extra_headers "${cuda_dir}/${h}")
    endif()
  endforeach()

  set(out "${CMAKE_CURRENT_BINARY_DIR}/generated")
  set(outputs
    "${out}/driver_stubs.cc"
    "${out}/per_thread_forms.cc"
    "${out}/driver_table.cc"
    "${out}/driver_table.h"
    "${out}/libcuda.map")

  add_custom_command(
    OUTPUT ${outputs}
    COMMAND "${Python3_EXECUTABLE}" "${script}" generate
            --cuda-h "${cuda_h}" ${extra_args}
            --exports "${ARG_EXPORTS}"
            --typedefs-h "${cuda_dir}/cudaTypedefs.h"
            --out-dir "${out}"
    DEPENDS "${script}" "${codegen_dir}/gen_per_thread_forms.py" "${cuda_h}" "${cuda_dir}/cudaTypedefs.h"
            ${extra_headers} "${ARG_EXPORTS}"
    COMMENT "Generating libcuda entry points (driver_stubs.cc, driver_table.cc, libcuda.map)"
    VERBATIM)

  # The generated sources include "api/not_supported.h" (frontend/) and
  # "driver_table.h" (generated dir).  -fno-lto: the uniform `int(void)` stub
  # prototypes intentionally differ from the real ones; with LTO, GCC would
  # flag every implemented entry point with -Wlto-type-mismatch.
  set_source_files_properties(
    "${out}/driver_stubs.cc" "${out}/per_thread_forms.cc" "${out}/driver_table.cc"
    PROPERTIES
      GENERATED TRUE
      INCLUDE_DIRECTORIES "${frontend_dir};${out}"
      COMPILE_OPTIONS "-fno-lto")
  set_source_files_properties("${out}/driver_table.h" "${out}/libcuda.map"
    PROPERTIES GENERATED TRUE HEADER_FILE_ONLY TRUE)

  set(${prefix} "${out}" PARENT_SCOPE)
  set(${prefix}_SOURCES ${outputs} PARENT_SCOPE)
  set(${prefix}_INCLUDE_DIR "${out}" PARENT_SCOPE)
  set(${prefix}_VERSION_SCRIPT "${out}/libcuda.map" PARENT_SCOPE)
  # -Bsymbolic-functions: the driver table (FindDriverSymbol/cuGetProcAddress)
  # and internal calls bind to this library's own definitions even when an
  # executable or LD_PRELOAD library exports a same-named cu* function
  # (interposing hooks would otherwise get their own pointer back and recurse).
  set(${prefix}_LINK_OPTIONS
    "-Wl,--version-script=${out}/libcuda.map"
    "-Wl,-Bsymbolic-functions"
    PARENT_SCOPE)
endfunction()

# Post-link check: the library must export exactly the names in
# driver_exports.txt (catches hand-written entry points that ended up hidden).
# Prints "N implemented, M not-supported stubs" on every link.
function(curelay_check_driver_exports target)
  cmake_parse_arguments(ARG "" "EXPORTS" "" ${ARGN})
  if(NOT ARG_EXPORTS)
    get_filename_component(frontend_dir "${CURELAY_CODEGEN_DIR}" DIRECTORY)
    set(ARG_EXPORTS "${frontend_dir}/driver_exports.txt")
  endif()
  if(CMAKE_NM)
    set(nm "${CMAKE_NM}")
  else()
    set(nm nm)
  endif()
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND "${Python3_EXECUTABLE}" "${CURELAY_CODEGEN_DIR}/gen_entry_points.py"
            check-exports --exports "${ARG_EXPORTS}" --nm "${nm}"
            "$<TARGET_FILE:${target}>"
    VERBATIM)
endfunction()
