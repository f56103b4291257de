// Kernels shared by the GPU tests (loaded as PTX, cubin and fatbin) and by the
// emulated driver, which binds host re-implementations to these entry names.
// Keep signatures in sync with tests/emulated_driver/kernels.cc: the emulator
// checks the PTX parameter layout before it binds an implementation.

// Passed by value to param_probe to check how struct parameters are packed
// (char at 0, double at 8, int[3] at 16; 32 bytes, 8-byte aligned).
struct ProbeStruct {
  char c;
  double d;
  int i[3];
};

// Read by cuModuleGetGlobal tests and updated by add_to_global.
__device__ unsigned int global_counter;

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// 64-bit index so that more than 2^32 elements can be filled.
extern "C" __global__ void fill_u32(unsigned int* p, unsigned int value, unsigned long long n) {
  unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

extern "C" __global__ void increment_i32(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

// Occupies the GPU for about `ns` nanoseconds; only one thread spins so the
// duration does not depend on the launch shape.
extern "C" __global__ void busy_wait_ns(unsigned long long ns) {
  if (blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0 || threadIdx.x != 0 ||
      threadIdx.y != 0 || threadIdx.z != 0) {
    return;
  }
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long now = start;
  while (now - start < ns) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
}

// Writes every parameter's bits as one 64-bit word so the host can check the
// parameter buffer layout: out[0..10] = u8, u16, u32, u64, f32 bits, f64 bits,
// s.c, s.d bits, s.i[0], s.i[1], s.i[2]. Signed values are sign-extended.
extern "C" __global__ void param_probe(unsigned char u8, unsigned short u16, unsigned int u32,
                                       unsigned long long u64, float f32, double f64,
                                       ProbeStruct s, unsigned long long* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  out[0] = u8;
  out[1] = u16;
  out[2] = u32;
  out[3] = u64;
  out[4] = __float_as_uint(f32);
  out[5] = static_cast<unsigned long long>(__double_as_longlong(f64));
  out[6] = static_cast<unsigned long long>(static_cast<long long>(s.c));
  out[7] = static_cast<unsigned long long>(__double_as_longlong(s.d));
  out[8] = static_cast<unsigned long long>(static_cast<long long>(s.i[0]));
  out[9] = static_cast<unsigned long long>(static_cast<long long>(s.i[1]));
  out[10] = static_cast<unsigned long long>(static_cast<long long>(s.i[2]));
}

// Every thread stores to p; tests pass an unmapped address to raise an
// illegal-address fault.
extern "C" __global__ void fault_store(int* p) {
  *reinterpret_cast<volatile int*>(p) = 0x0badf00d;
}

// Every thread adds v, so a <<<g, b>>> launch adds g*b*v.
extern "C" __global__ void add_to_global(unsigned int v) {
  atomicAdd(&global_counter, v);
}

extern "C" __global__ void empty_kernel() {}
