// A logging pass-through libnvidia-ml.so.1 (GPU-host probe, not product): nvidia-smi or any NVML client run with
// this first on LD_LIBRARY_PATH logs every NVML call and internal-table slot it makes, with the result, to
// $NVML_TRACE_LOG; the calls go on to the library at $NVML_TRACE_REAL (the host's NVML, or curelay's NVML shim), so
// a native run and a run on the shim can be diffed call by call (run.sh).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef long (*Fn)(long, long, long, long, long, long);
static long Forward(int index, long a, long b, long c, long d, long e, long g);
static long ForwardSlot(int slot, long a, long b, long c, long d, long e, long g);
#include "nvml_wrappers.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static void* real_library;
static FILE* trace_log;

static void Load(void) {
  const char* path = getenv("NVML_TRACE_REAL");
  real_library = dlopen(path ? path : "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  const char* log_path = getenv("NVML_TRACE_LOG");
  trace_log = log_path ? fopen(log_path, "a") : stderr;
  if (real_library == NULL) { fprintf(trace_log ? trace_log : stderr, "nvml-trace: %s\n", dlerror()); return; }
  for (int i = 0; i < kNumNames; ++i) real_fn[i] = (Fn)dlsym(real_library, kNames[i]);
}

static void Log(const char* what, long result, long a, long b, long c) {
  if (trace_log == NULL) return;
  pthread_mutex_lock(&log_lock);
  fprintf(trace_log, "%s rc=%ld args=%#lx %#lx %#lx\n", what, result, a, b, c);
  fflush(trace_log);
  pthread_mutex_unlock(&log_lock);
}

static long Forward(int index, long a, long b, long c, long d, long e, long g) {
  pthread_once(&once, Load);
  if (real_fn[index] == NULL) { Log(kNames[index], -1, a, b, c); return 13; /* NVML_ERROR_FUNCTION_NOT_FOUND */ }
  long result = real_fn[index](a, b, c, d, e, g);
  Log(kNames[index], (int)result, a, b, c);
  return result;
}

static long ForwardSlot(int slot, long a, long b, long c, long d, long e, long g) {
  long result = real_slot[slot](a, b, c, d, e, g);
  char what[32];
  snprintf(what, sizeof what, "slot %d", slot);
  Log(what, (int)result, a, b, c);
  return result;
}

// The table keeps its size word (bytes) and every slot that is set, each through its logging wrapper.
static long table_copy[kSlots];
__attribute__((visibility("default"))) int nvmlInternalGetExportTable(const void** table, const unsigned char* id) {
  pthread_once(&once, Load);
  int (*real)(const void**, const unsigned char*) =
      real_library ? (int (*)(const void**, const unsigned char*))dlsym(real_library, "nvmlInternalGetExportTable") : NULL;
  if (real == NULL) return 13;
  int result = real(table, id);
  Log("nvmlInternalGetExportTable", result, (long)table, id ? ((const long*)id)[0] : 0, id ? ((const long*)id)[1] : 0);
  // Only nvidia-smi's table (6c3efec4-...) is wrapped, once: its slots are the ones the wrappers forward to.
  static const unsigned char kSmiTableId[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                                0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
  if (result != 0 || table == NULL || *table == NULL || memcmp(id, kSmiTableId, 16) != 0) return result;
  if (table_copy[0] != 0) {
    *table = table_copy;
    return result;
  }
  const long* words = (const long*)*table;
  long count = words[0] / 8;
  if (count > kSlots) count = kSlots;
  table_copy[0] = count * 8;  // what the copy holds, never more
  for (long k = 1; k < count; ++k) {
    real_slot[k] = (Fn)words[k];
    table_copy[k] = words[k] ? (long)kSlotWrappers[k] : 0;
  }
  Log("internal table size", words[0], 0, 0, 0);
  *table = table_copy;
  return result;
}
