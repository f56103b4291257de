// GPU-host probe (not product): asks the real driver's integrity-check table (d4082055…) for its answer to a few
// (version, time) pairs, and prints every input the answer may depend on, as test vectors for curelay's own
// implementation. Build: gcc -O2 integrity_vectors.c -o integrity_vectors -ldl -lpthread
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*get_export_table_t)(const void**, const unsigned char*);
typedef int (*integrity_fn_t)(uint32_t, uint64_t, uint64_t*);
typedef int (*init_t)(unsigned);
typedef int (*int_out_t)(int*);
typedef int (*device_get_t)(int*, int);
typedef int (*attribute_t)(int*, int, int);
typedef int (*uuid_t_)(unsigned char*, int);

int main(int argc, char** argv) {
  void* lib = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  get_export_table_t get = (get_export_table_t)dlsym(lib, "cuGetExportTable");
  static const unsigned char kIntegrity[16] = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                                               0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};
  static const unsigned char kCudart[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                            0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
  int init_first = argc > 2 && argv[2][0] == '1';
  if (init_first) ((init_t)dlsym(lib, "cuInit"))(0);
  const void* integrity = NULL;
  const void* cudart = NULL;
  int r1 = get(&integrity, kIntegrity), r2 = get(&cudart, kCudart);
  printf("tables integrity=%p (rc %d, size %zu) cudart=%p (rc %d, size %zu)\n", integrity, r1,
         integrity ? *(const size_t*)integrity : 0, cudart, r2, cudart ? *(const size_t*)cudart : 0);
  if (!integrity) return 1;
  integrity_fn_t fn = (integrity_fn_t)((void* const*)integrity)[1];
  printf("pid %d thread %u fn %p init_first %d\n", (int)getpid(), (unsigned)(uint32_t)pthread_self(), (void*)fn,
         init_first);
  const uint32_t versions[] = {13000, 13001, 13002, 13003, 12080, 12082};
  const uint64_t times[] = {1700000000ull, 1763700000ull};
  for (unsigned v = 0; v < sizeof versions / sizeof *versions; v++)
    for (unsigned t = 0; t < 2; t++) {
      uint64_t out[2] = {0, 0};
      int rc = fn(versions[v], times[t], out);
      printf("vector version %u time %llu rc %d out %016llx %016llx\n", versions[v], (unsigned long long)times[t], rc,
             (unsigned long long)out[0], (unsigned long long)out[1]);
    }
  ((init_t)dlsym(lib, "cuInit"))(0);
  int driver = 0, count = 0;
  ((int_out_t)dlsym(lib, "cuDriverGetVersion"))(&driver);
  ((int_out_t)dlsym(lib, "cuDeviceGetCount"))(&count);
  printf("driver_version %d devices %d\n", driver, count);
  attribute_t attr = (attribute_t)dlsym(lib, "cuDeviceGetAttribute");
  uuid_t_ get_uuid = (uuid_t_)dlsym(lib, "cuDeviceGetUuid_v2");
  for (int d = 0; d < count; d++) {
    unsigned char uuid[16];
    get_uuid(uuid, d);
    int domain = 0, bus = 0, device = 0;
    attr(&domain, 50 /*PCI_DOMAIN_ID*/, d);
    attr(&bus, 33 /*PCI_BUS_ID*/, d);
    attr(&device, 34 /*PCI_DEVICE_ID*/, d);
    printf("device %d uuid ", d);
    for (int i = 0; i < 16; i++) printf("%02x", uuid[i]);
    printf(" pci %d %d %d\n", domain, bus, device);
  }
  // The answer again after cuInit, same inputs: shows whether device data enters the hash only once initialized.
  uint64_t out[2] = {0, 0};
  int rc = fn(13002, 1700000000ull, out);
  printf("after_init version 13002 time 1700000000 rc %d out %016llx %016llx\n", rc, (unsigned long long)out[0],
         (unsigned long long)out[1]);
  return 0;
}
