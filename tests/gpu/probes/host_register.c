// GPU-host probe (not product): can the driver pin and map host pages that are a shared file mapping, as curelay's
// mapped host memory is? Tries a file in each directory given (and anonymous memory for comparison).
// Build: gcc -O2 host_register.c -o host_register -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int (*init_t)(unsigned);
typedef int (*retain_t)(void**, int);
typedef int (*set_t)(void*);
typedef int (*reg_t)(void*, size_t, unsigned);
typedef int (*unreg_t)(void*);
typedef int (*devptr_t)(unsigned long long*, void*, unsigned);

int main(int argc, char** argv) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) return 1;
  ((init_t)dlsym(lib, "cuInit"))(0);
  void* ctx = NULL;
  ((retain_t)dlsym(lib, "cuDevicePrimaryCtxRetain"))(&ctx, 0);
  ((set_t)dlsym(lib, "cuCtxSetCurrent"))(ctx);
  reg_t reg = (reg_t)dlsym(lib, "cuMemHostRegister_v2");
  unreg_t unreg = (unreg_t)dlsym(lib, "cuMemHostUnregister");
  devptr_t devptr = (devptr_t)dlsym(lib, "cuMemHostGetDevicePointer_v2");
  const size_t bytes = 2 << 20;
  for (int i = 0; i <= argc - 1; i++) {
    void* p;
    const char* where = i == 0 ? "anonymous" : argv[i];
    if (i == 0) {
      p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    } else {
      char path[512];
      snprintf(path, sizeof path, "%s/hostreg-probe-%d", argv[i], getpid());
      int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
      if (fd < 0 || ftruncate(fd, bytes) != 0) { printf("%s: cannot create file\n", where); continue; }
      p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      unlink(path);
    }
    int r1 = reg(p, bytes, 0x2 | 0x1);
    unsigned long long d = 0;
    int r2 = r1 == 0 ? devptr(&d, p, 0) : -1;
    printf("%s: cuMemHostRegister(DEVICEMAP|PORTABLE) -> %d, device pointer -> %d (%s host address)\n", where, r1, r2,
           d == (unsigned long long)p ? "same as" : "differs from");
    if (r1 == 0) unreg(p);
    r1 = reg(p, bytes, 0);
    printf("%s: cuMemHostRegister(0) -> %d\n", where, r1);
    if (r1 == 0) unreg(p);
  }
  return 0;
}
