/* GPU-host probe (not product): what ToolsModule (6e163fbe...) slot 7 does. cuFFT calls it right after
 * cuModuleLoadData as slot7(ctx, module, a function in libcufft whose code is `*(void**)a = b`, &function) and then
 * launches the CUfunction it got (measured with export_trace's call trace): the third argument looks like a
 * callback the driver calls with (fourth argument, CUfunction). This calls it with a recording callback on modules
 * of one and of several kernels and prints the result and every call the callback got.
 * Build: gcc -O1 -o slot7 tools_module_slot7.c -I/usr/local/cuda/include -L<driver dir> -lcuda
 * Usage: slot7 <multi-kernel.ptx> */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*slot7_t)(CUcontext, CUmodule, const void*, CUfunction*);

static const char kOneKernel[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry only_kernel(.param .u64 p)\n{\n ret;\n}\n";

static void host_stub(void) {}

static void record(void* user, CUfunction function) {
  int* calls = (int*)user;
  const char* name = "(no name)";
  cuFuncGetName(&name, function);
  printf("    callback #%d (user %p, function %p %s)\n", ++*calls, user, (void*)function, name);
}

static void walk(const char* what, slot7_t slot7, CUcontext ctx, CUmodule module) {
  int calls = 0;
  int result = slot7(ctx, module, (const void*)record, (CUfunction*)&calls);
  printf("%-40s result %d, %d callback calls\n", what, result, calls);
}

static void ask(const char* what, slot7_t slot7, CUcontext ctx, CUmodule module, const void* key) {
  CUfunction out = (CUfunction)(uintptr_t)0x5a5a5a5a;
  int result = slot7(ctx, module, key, &out);
  const char* name = "?";
  if (out != (CUfunction)(uintptr_t)0x5a5a5a5a && out != NULL && cuFuncGetName(&name, out) != CUDA_SUCCESS) name = "(no name)";
  printf("%-40s result %d out %p name %s\n", what, result, (void*)out, out == (CUfunction)(uintptr_t)0x5a5a5a5a ? "(unwritten)" : name);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  setvbuf(stdout, NULL, _IONBF, 0);
  cuInit(0);
  CUcontext ctx;
  cuDevicePrimaryCtxRetain(&ctx, 0);
  cuCtxSetCurrent(ctx);
  static const CUuuid tools_module = {{0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}};
  const void* const* table = NULL;
  if (cuGetExportTable((const void**)&table, &tools_module) != CUDA_SUCCESS) return 3;
  slot7_t slot7 = (slot7_t)table[7];
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 4;
  static char ptx[1 << 22];
  size_t n = fread(ptx, 1, sizeof ptx - 1, f);
  ptx[n] = 0;
  CUmodule one, many;
  printf("load one: %d\n", cuModuleLoadData(&one, kOneKernel));
  printf("load many: %d\n", cuModuleLoadData(&many, ptx));
  unsigned count = 0;
  cuModuleGetFunctionCount(&count, many);
  printf("many has %u functions\n", count);
  ask("one kernel, a callback that does nothing", slot7, ctx, one, (const void*)host_stub);
  walk("one kernel, recording callback", slot7, ctx, one);
  walk("many kernels, recording callback", slot7, ctx, many);
  walk("one kernel, NULL ctx", slot7, NULL, one);
  cuCtxSetCurrent(NULL);
  walk("one kernel, no current context", slot7, ctx, one);
  cuCtxSetCurrent(ctx);
  CUlibrary library;
  printf("library load: %d\n", cuLibraryLoadData(&library, ptx, NULL, NULL, 0, NULL, NULL, 0));
  CUmodule library_module;
  if (cuLibraryGetModule(&library_module, library) == CUDA_SUCCESS) walk("library's module", slot7, ctx, library_module);
  cuModuleUnload(one);
  walk("NULL module", slot7, ctx, NULL);
  return 0;
}
