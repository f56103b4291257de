// GPU-host probe (not product): a pass-through libcuda.so.1 that logs every private export table a client asks
// for, including the requests cudart makes through the cuGetExportTable pointer it gets from cuGetProcAddress.
// For each table: the caller library, the size word, which words are code pointers into the driver; each slot call
// with its result, arguments and what they point to afterwards (tables named in TRACE_NO_WRAP are handed out unwrapped: the runtime's
// integrity check hashes the table addresses it receives).
// Environment: REAL_LIBCUDA, TRACE_LOG, TRACE_NO_WRAP (comma-separated uuid prefixes, e.g. "6bd5fb6c,d4082055").
// Built with CALL_TRACE (gen_passthrough.py --calls), it also logs every driver call and its result ("CALL name
// result"), whether the client called the exported symbol or a pointer cuGetProcAddress handed out.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include "names.h"

extern void* real_tab[] __attribute__((visibility("hidden")));
extern void* slot_real[] __attribute__((visibility("hidden")));
extern void* slot_tramps[] __attribute__((visibility("hidden")));

static void* real;
static FILE* trace;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static Dl_info real_info;

__attribute__((constructor)) static void init(void) {
  real = dlopen(getenv("REAL_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
  if (!real) { fprintf(stderr, "export_trace: cannot open real libcuda\n"); abort(); }
  for (int i = 0; i < kNumNames; i++) real_tab[i] = dlsym(real, kNames[i]);
  dladdr(dlsym(real, "cuInit"), &real_info);
  trace = fopen(getenv("TRACE_LOG") ? getenv("TRACE_LOG") : "/dev/stderr", "a");
}

static const char* caller_name(void* ret) {
  Dl_info info;
  if (dladdr(ret, &info) && info.dli_fname) { const char* s = strrchr(info.dli_fname, '/'); return s ? s + 1 : info.dli_fname; }
  return "?";
}

static int in_driver(const void* p) {
  Dl_info info;
  return p && dladdr(p, &info) && info.dli_fbase == real_info.dli_fbase;
}

static unsigned char table_uuid[kMaxTables][16];
static void* table_copy[kMaxTables][kMaxSlots];
static int table_count;
static unsigned long slot_calls[kMaxTables * kMaxSlots];

// Reads two words at p if p is mapped (process_vm_readv fails cleanly where a plain read would fault).
static int peek(unsigned long p, unsigned long out[2]) {
  if (p < 0x10000) return 0;
  struct iovec local = {out, 16}, remote = {(void*)p, 16};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 16;
}

// saved: the six integer arguments and the caller's return address (slot_tramp.S).
__attribute__((visibility("hidden"))) void slot_log(long k, unsigned long result, const unsigned long* saved) {
  static __thread int depth;
  if (depth) return;
  depth++;
  unsigned long n = __atomic_add_fetch(&slot_calls[k], 1, __ATOMIC_RELAXED);
  if (n <= 4 || (n & (n - 1)) == 0) {
    pthread_mutex_lock(&mu);
    const unsigned char* u = table_uuid[k / kMaxSlots];
    fprintf(trace, "SLOT %02x%02x%02x%02x s%ld n%lu -> %lx args", u[0], u[1], u[2], u[3], k % kMaxSlots, n, result);
    for (int i = 0; i < 4; i++) {
      unsigned long w[2], more[2];
      if (peek(saved[i], w) && peek(saved[i] + 16, more))
        fprintf(trace, " %lx[%lx,%lx,%lx,%lx]", saved[i], w[0], w[1], more[0], more[1]);
      else if (peek(saved[i], w)) fprintf(trace, " %lx[%lx,%lx]", saved[i], w[0], w[1]);
      else fprintf(trace, " %lx", saved[i]);
    }
    fprintf(trace, " caller %s\n", caller_name((void*)saved[6]));
    fflush(trace);
    pthread_mutex_unlock(&mu);
  }
  depth--;
}

// TRACE_REFUSE: comma-separated uuid prefixes answered with CUDA_ERROR_INVALID_VALUE and a null table, as if the
// driver lacked them (shows whether callers have a fallback).
static int refused(const unsigned char* uuid) {
  const char* list = getenv("TRACE_REFUSE");
  if (!list) return 0;
  char hex[9];
  snprintf(hex, sizeof hex, "%02x%02x%02x%02x", uuid[0], uuid[1], uuid[2], uuid[3]);
  return strstr(list, hex) != NULL;
}

static int wrap_allowed(const unsigned char* uuid) {
  const char* list = getenv("TRACE_NO_WRAP");
  if (!list) return 1;
  char hex[9];
  snprintf(hex, sizeof hex, "%02x%02x%02x%02x", uuid[0], uuid[1], uuid[2], uuid[3]);
  return strstr(list, hex) == NULL;
}

// Words 0..n-1 of a table: the size word (absent in the context-local-storage table) and slots. A word that points
// into the driver's code is a slot; anything else (sizes, nested size words) is kept as it is.
static const void* wrap_table(const unsigned char* uuid, const void* const* src, void* ret) {
  int t = -1;
  for (int i = 0; i < table_count; i++)
    if (!memcmp(table_uuid[i], uuid, 16)) t = i;
  int fresh = t < 0;
  if (fresh) {
    if (table_count == kMaxTables) return src;
    t = table_count++;
    memcpy(table_uuid[t], uuid, 16);
  }
  int has_size = !in_driver(src[0]);
  size_t words = has_size ? *(const size_t*)src / 8 : 4;
  if (words > kMaxSlots) words = kMaxSlots;
  int wrap = wrap_allowed(uuid);
  if (fresh) {
    fprintf(trace, "TABLE %02x%02x%02x%02x words=%zu size_word=%s wrap=%d first_caller=%s\n", uuid[0], uuid[1], uuid[2],
            uuid[3], words, has_size ? "yes" : "no", wrap, caller_name(ret));
    for (size_t i = 0; i < words; i++) {
      const void* w = src[i];
      int code = in_driver(w);
      fprintf(trace, "  word %zu %s %lx\n", i, code ? "fn" : "data",
              code ? (unsigned long)((const char*)w - (const char*)real_info.dli_fbase) : (unsigned long)w);
      slot_real[t * kMaxSlots + i] = (void*)w;
      table_copy[t][i] = code ? slot_tramps[t * kMaxSlots + i] : (void*)w;
    }
  }
  return wrap ? (const void*)table_copy[t] : (const void*)src;
}

#ifdef CALL_TRACE
extern void* fn_tramps[] __attribute__((visibility("hidden")));
enum { kMaxDepth = 256 };
static __thread void* return_stack[kMaxDepth];
static __thread unsigned long first_arguments[kMaxDepth][2];
static __thread int return_depth;

// saved: the pushed argument registers, r9 first (call_tramp.S); the first two arguments are logged on exit.
__attribute__((visibility("hidden"))) void fn_enter(long k, void* ret, const unsigned long* saved) {
  (void)k;
  if (return_depth == kMaxDepth) abort();
  first_arguments[return_depth][0] = saved[5];
  first_arguments[return_depth][1] = saved[4];
  return_stack[return_depth++] = ret;
}

__attribute__((visibility("hidden"))) void* fn_exit(long k, unsigned long result) {
  pthread_mutex_lock(&mu);
  const unsigned long* arguments = first_arguments[return_depth - 1];
  unsigned long w[2];
  fprintf(trace, "CALL %s %d%s (%lx", kNames[k], (int)result, return_depth > 1 ? " nested" : "", arguments[0]);
  if (peek(arguments[0], w)) fprintf(trace, "[%lx,%lx]", w[0], w[1]);
  fprintf(trace, ", %lx)\n", arguments[1]);
  fflush(trace);
  pthread_mutex_unlock(&mu);
  return return_stack[--return_depth];
}

// A pointer cuGetProcAddress hands out is traced too when it is one of the exported functions.
static void trace_pointer(void** pfn) {
  for (int i = 0; i < kNumNames; i++) {
    if (real_tab[i] == *pfn && real_tab[i] != NULL) {
      *pfn = fn_tramps[i];
      return;
    }
  }
}
#endif

typedef int (*get_export_table_t)(const void**, const void*);
int cuGetExportTable(const void** table, const void* uuid) {
  static get_export_table_t real_get;
  if (!real_get) real_get = (get_export_table_t)dlsym(real, "cuGetExportTable");
  const unsigned char* u = uuid;
  int r = 1;
  if (refused(u)) *table = NULL;
  else r = real_get(table, uuid);
  pthread_mutex_lock(&mu);
  fprintf(trace, "EXPORT ");
  for (int i = 0; i < 16; i++) fprintf(trace, "%02x", u[i]);
  fprintf(trace, " -> %d caller %s\n", r, caller_name(__builtin_return_address(0)));
  if (r == 0 && *table) *table = wrap_table(u, (const void* const*)*table, __builtin_return_address(0));
  fflush(trace);
  pthread_mutex_unlock(&mu);
  return r;
}

typedef int (*gpa2_t)(const char*, void**, int, uint64_t, int*);
typedef int (*gpa_t)(const char*, void**, int, uint64_t);
int cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status);
int cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags);

// Whatever the driver hands out for the three wrapped functions is replaced by this library's own, so every later
// look-up and every export-table request (cudart resolves both through cuGetProcAddress) passes through here.
static void swap_in_ours(void** pfn, int r) {
  if (r != 0 || !pfn || !*pfn) return;
  if (*pfn == dlsym(real, "cuGetExportTable")) *pfn = (void*)cuGetExportTable;
  else if (*pfn == dlsym(real, "cuGetProcAddress")) *pfn = (void*)cuGetProcAddress;
  else if (*pfn == dlsym(real, "cuGetProcAddress_v2")) *pfn = (void*)cuGetProcAddress_v2;
#ifdef CALL_TRACE
  else trace_pointer(pfn);
#endif
}
int cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status) {
  static gpa2_t f;
  if (!f) f = (gpa2_t)dlsym(real, "cuGetProcAddress_v2");
  int r = f(symbol, pfn, version, flags, status);
  swap_in_ours(pfn, r);
  return r;
}
int cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags) {
  static gpa_t f;
  if (!f) f = (gpa_t)dlsym(real, "cuGetProcAddress");
  int r = f(symbol, pfn, version, flags);
  swap_in_ours(pfn, r);
  return r;
}
