/* GPU-host probe (not product): what the native driver answers for the entry-point families curelay has not
 * implemented yet (mipmapped, planar and sparse arrays; execution affinity; multicast; managed range queries and
 * batched prefetch; pointer attributes that are set; unified functions; logs; cooperative multi-device launches),
 * so the shim answers the same. One line per question: NAME result [values].
 * Build: gcc -O1 -o driver_families driver_families.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda
 */
#define CUDA_DISABLE_DEPRECATED_WARNINGS 1
#include <cuda.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

/* Exported by the driver, declared by cuda.h only for its own build. */
CUresult CUDAAPI cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int count, unsigned int flags,
                                CUdevice dev);

/* A call that crashes in the driver answers -999 and the probe goes on. */
static sigjmp_buf crashed;
static void OnCrash(int signal) { siglongjmp(crashed, signal); }
#define TRY(out, call)                   \
  do {                                   \
    if (sigsetjmp(crashed, 1) == 0) {    \
      out = (call);                      \
    } else {                             \
      out = (CUresult)-999;              \
    }                                    \
  } while (0)
#define SHOW(name, call)                          \
  do {                                            \
    CUresult r_;                                  \
    TRY(r_, call);                                \
    printf("%-44s %d\n", name, (int)r_);          \
  } while (0)

static const char kPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry noop(.param .u64 p) { ret; }\n";

static void DescribeArray(const char* name, CUarray array) {
  CUDA_ARRAY3D_DESCRIPTOR d;
  memset(&d, 0, sizeof d);
  CUresult r;
  TRY(r, cuArray3DGetDescriptor(&d, array));
  printf("%-44s %d w=%zu h=%zu d=%zu fmt=0x%x ch=%u flags=0x%x\n", name, (int)r, d.Width, d.Height, d.Depth,
         (unsigned)d.Format, d.NumChannels, d.Flags);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  signal(SIGSEGV, OnCrash);
  signal(SIGBUS, OnCrash);  /* a driver crash must not lose the answers before it */
  CUdevice dev;
  CUcontext ctx;
  cuInit(0);
  cuDeviceGet(&dev, 0);
  cuDevicePrimaryCtxRetain(&ctx, dev);
  cuCtxSetCurrent(ctx);

  /* Mipmapped arrays. */
  CUDA_ARRAY3D_DESCRIPTOR md;
  memset(&md, 0, sizeof md);
  md.Width = 64; md.Height = 48; md.Format = CU_AD_FORMAT_FLOAT; md.NumChannels = 1;
  CUmipmappedArray mip = NULL;
  SHOW("cuMipmappedArrayCreate 64x48 4 levels", cuMipmappedArrayCreate(&mip, &md, 4));
  CUmipmappedArray mip_big = NULL;
  SHOW("cuMipmappedArrayCreate 64x48 30 levels", cuMipmappedArrayCreate(&mip_big, &md, 30));
  if (mip_big) cuMipmappedArrayDestroy(mip_big);
  SHOW("cuMipmappedArrayCreate 0 levels", cuMipmappedArrayCreate(&mip_big, &md, 0));
  CUarray l0 = NULL, l0b = NULL, l2 = NULL, l4 = NULL;
  SHOW("cuMipmappedArrayGetLevel 0", cuMipmappedArrayGetLevel(&l0, mip, 0));
  SHOW("cuMipmappedArrayGetLevel 0 again", cuMipmappedArrayGetLevel(&l0b, mip, 0));
  printf("%-44s %d\n", "level 0 same handle twice", l0 == l0b);
  SHOW("cuMipmappedArrayGetLevel 2", cuMipmappedArrayGetLevel(&l2, mip, 2));
  SHOW("cuMipmappedArrayGetLevel 4 (past the last)", cuMipmappedArrayGetLevel(&l4, mip, 4));
  DescribeArray("level 0 descriptor", l0);
  DescribeArray("level 2 descriptor", l2);
  CUDA_ARRAY_MEMORY_REQUIREMENTS req;
  memset(&req, 0, sizeof req);
  CUresult r;
  TRY(r, cuMipmappedArrayGetMemoryRequirements(&req, mip, dev));
  printf("%-44s %d size=%zu align=%zu\n", "cuMipmappedArrayGetMemoryRequirements dense", (int)r, req.size, req.alignment);
  TRY(r, cuArrayGetMemoryRequirements(&req, l0, dev));
  printf("%-44s %d size=%zu align=%zu\n", "cuArrayGetMemoryRequirements dense level", (int)r, req.size, req.alignment);
  CUDA_ARRAY_SPARSE_PROPERTIES sp;
  memset(&sp, 0, sizeof sp);
  SHOW("cuMipmappedArrayGetSparseProperties dense", cuMipmappedArrayGetSparseProperties(&sp, mip));
  SHOW("cuArrayGetSparseProperties dense", cuArrayGetSparseProperties(&sp, l0));
  /* A texture object on the mipmapped array. */
  CUDA_RESOURCE_DESC res;
  memset(&res, 0, sizeof res);
  res.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
  res.res.mipmap.hMipmappedArray = mip;
  CUDA_TEXTURE_DESC tex;
  memset(&tex, 0, sizeof tex);
  tex.filterMode = CU_TR_FILTER_MODE_LINEAR;
  tex.mipmapFilterMode = CU_TR_FILTER_MODE_LINEAR;
  tex.maxMipmapLevelClamp = 3;
  tex.flags = CU_TRSF_NORMALIZED_COORDINATES;
  CUtexObject to = 0;
  SHOW("cuTexObjectCreate on mipmapped", cuTexObjectCreate(&to, &res, &tex, NULL));
  CUDA_RESOURCE_DESC back;
  memset(&back, 0, sizeof back);
  TRY(r, cuTexObjectGetResourceDesc(&back, to));
  printf("%-44s %d type=%d same=%d\n", "cuTexObjectGetResourceDesc", (int)r, (int)back.resType,
         back.res.mipmap.hMipmappedArray == mip);
  cuTexObjectDestroy(to);
  CUsurfObject so = 0;
  SHOW("cuSurfObjectCreate on mipmapped", cuSurfObjectCreate(&so, &res));
  SHOW("cuArrayDestroy of a level", cuArrayDestroy(l2));
  SHOW("cuMipmappedArrayGetLevel 2 after that", cuMipmappedArrayGetLevel(&l2, mip, 2));
  SHOW("cuMipmappedArrayDestroy", cuMipmappedArrayDestroy(mip));
  SHOW("cuMipmappedArrayDestroy twice", cuMipmappedArrayDestroy(mip));
  SHOW("cuArray3DGetDescriptor of a destroyed level", cuArray3DGetDescriptor(&md, l0));
  /* Layered mipmapped array and a surface-flagged one. */
  memset(&md, 0, sizeof md);
  md.Width = 32; md.Height = 32; md.Depth = 4; md.Format = CU_AD_FORMAT_UNSIGNED_INT8; md.NumChannels = 4;
  md.Flags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST;
  SHOW("cuMipmappedArrayCreate layered surface", cuMipmappedArrayCreate(&mip, &md, 3));
  if (mip) {
    SHOW("cuMipmappedArrayGetLevel 1 layered", cuMipmappedArrayGetLevel(&l0, mip, 1));
    DescribeArray("layered level 1 descriptor", l0);
    cuMipmappedArrayDestroy(mip);
  }

  /* Planar (NV12) arrays. */
  memset(&md, 0, sizeof md);
  md.Width = 64; md.Height = 64; md.Format = CU_AD_FORMAT_NV12; md.NumChannels = 3;
  CUarray nv12 = NULL, plane0 = NULL, plane1 = NULL, plane1b = NULL, plane2 = NULL;
  SHOW("cuArray3DCreate NV12 3 channels", cuArray3DCreate(&nv12, &md));
  if (!nv12) {
    md.NumChannels = 1;
    SHOW("cuArray3DCreate NV12 1 channel", cuArray3DCreate(&nv12, &md));
  }
  DescribeArray("NV12 descriptor", nv12);
  SHOW("cuArrayGetPlane 0", cuArrayGetPlane(&plane0, nv12, 0));
  SHOW("cuArrayGetPlane 1", cuArrayGetPlane(&plane1, nv12, 1));
  SHOW("cuArrayGetPlane 1 again", cuArrayGetPlane(&plane1b, nv12, 1));
  printf("%-44s %d\n", "plane 1 same handle twice", plane1 == plane1b);
  SHOW("cuArrayGetPlane 2", cuArrayGetPlane(&plane2, nv12, 2));
  DescribeArray("plane 0 descriptor", plane0);
  DescribeArray("plane 1 descriptor", plane1);
  CUarray flat = NULL;
  md.Format = CU_AD_FORMAT_FLOAT; md.NumChannels = 1;
  cuArray3DCreate(&flat, &md);
  SHOW("cuArrayGetPlane of a flat array", cuArrayGetPlane(&plane2, flat, 0));
  SHOW("cuArrayDestroy of a plane", cuArrayDestroy(plane1));
  SHOW("cuArrayDestroy NV12", cuArrayDestroy(nv12));
  cuArrayDestroy(flat);

  /* Sparse arrays and cuMemMapArrayAsync. */
  int sparse = 0;
  cuDeviceGetAttribute(&sparse, CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, dev);
  printf("%-44s %d\n", "SPARSE_CUDA_ARRAY_SUPPORTED", sparse);
  memset(&md, 0, sizeof md);
  md.Width = 1024; md.Height = 1024; md.Format = CU_AD_FORMAT_FLOAT; md.NumChannels = 1;
  md.Flags = CUDA_ARRAY3D_SPARSE;
  CUarray sa = NULL;
  SHOW("cuArray3DCreate sparse 1024x1024", cuArray3DCreate(&sa, &md));
  memset(&sp, 0, sizeof sp);
  TRY(r, cuArrayGetSparseProperties(&sp, sa));
  printf("%-44s %d tile=%ux%ux%u miptailFirst=%u miptailSize=%llu flags=0x%x\n", "cuArrayGetSparseProperties", (int)r,
         sp.tileExtent.width, sp.tileExtent.height, sp.tileExtent.depth, sp.miptailFirstLevel,
         (unsigned long long)sp.miptailSize, sp.flags);
  TRY(r, cuArrayGetMemoryRequirements(&req, sa, dev));
  printf("%-44s %d size=%zu align=%zu\n", "cuArrayGetMemoryRequirements sparse", (int)r, req.size, req.alignment);
  CUmipmappedArray smip = NULL;
  SHOW("cuMipmappedArrayCreate sparse 5 levels", cuMipmappedArrayCreate(&smip, &md, 5));
  TRY(r, cuMipmappedArrayGetSparseProperties(&sp, smip));
  printf("%-44s %d tile=%ux%ux%u miptailFirst=%u miptailSize=%llu flags=0x%x\n", "cuMipmappedArrayGetSparseProperties",
         (int)r, sp.tileExtent.width, sp.tileExtent.height, sp.tileExtent.depth, sp.miptailFirstLevel,
         (unsigned long long)sp.miptailSize, sp.flags);
  /* Back the array's first tile with physical memory, copy into it, unmap. */
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t gran = 0;
  cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  CUmemGenericAllocationHandle mem = 0;
  SHOW("cuMemCreate granularity", cuMemCreate(&mem, gran, &prop, 0));
  CUarrayMapInfo info;
  memset(&info, 0, sizeof info);
  info.resourceType = CU_RESOURCE_TYPE_ARRAY;
  info.resource.array = sa;
  info.subresourceType = CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL;
  info.subresource.sparseLevel.extentWidth = sp.tileExtent.width;
  info.subresource.sparseLevel.extentHeight = sp.tileExtent.height;
  info.subresource.sparseLevel.extentDepth = 1;
  info.memOperationType = CU_MEM_OPERATION_TYPE_MAP;
  info.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
  info.memHandle.memHandle = mem;
  info.deviceBitMask = 1;
  SHOW("cuMemMapArrayAsync map a tile", cuMemMapArrayAsync(&info, 1, 0));
  SHOW("cuStreamSynchronize", cuStreamSynchronize(0));
  float ones[4] = {1, 2, 3, 4}, got[4] = {0, 0, 0, 0};
  SHOW("cuMemcpyHtoA into the mapped tile", cuMemcpyHtoA(sa, 0, ones, sizeof ones));
  SHOW("cuMemcpyAtoH back", cuMemcpyAtoH(got, sa, 0, sizeof got));
  printf("%-44s %g %g %g %g\n", "tile values", got[0], got[1], got[2], got[3]);
  info.memOperationType = CU_MEM_OPERATION_TYPE_UNMAP;
  info.memHandle.memHandle = 0;
  SHOW("cuMemMapArrayAsync unmap", cuMemMapArrayAsync(&info, 1, 0));
  SHOW("cuMemMapArrayAsync count 0", cuMemMapArrayAsync(&info, 0, 0));
  info.resource.array = NULL;
  info.memOperationType = CU_MEM_OPERATION_TYPE_MAP;
  info.memHandle.memHandle = mem;
  SHOW("cuMemMapArrayAsync null array", cuMemMapArrayAsync(&info, 1, 0));
  cuStreamSynchronize(0);
  cuMemRelease(mem);
  if (smip) cuMipmappedArrayDestroy(smip);
  if (sa) cuArrayDestroy(sa);

  /* Execution affinity. */
  CUexecAffinityParam aff;
  memset(&aff, 0, sizeof aff);
  aff.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  aff.param.smCount.val = 8;
  CUcontext actx = NULL;
  int affinity_supported = -1;
  cuDeviceGetExecAffinitySupport(&affinity_supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, dev);
  printf("%-44s %d\n", "ExecAffinitySupport SM_COUNT", affinity_supported);
  SHOW("cuCtxCreate_v3 SM count 8", cuCtxCreate_v3(&actx, &aff, 1, 0, dev));
  if (actx) {
    CUexecAffinityParam got_aff;
    TRY(r, cuCtxGetExecAffinity(&got_aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
    printf("%-44s %d %u\n", "cuCtxGetExecAffinity", (int)r, got_aff.param.smCount.val);
    cuCtxDestroy(actx);
    actx = NULL;
  }
  SHOW("cuCtxCreate_v3 no params", cuCtxCreate_v3(&actx, NULL, 0, 0, dev));
  if (actx) cuCtxDestroy(actx);
  cuCtxSetCurrent(ctx);

  /* Multicast. */
  int mc = -1;
  cuDeviceGetAttribute(&mc, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev);
  printf("%-44s %d\n", "MULTICAST_SUPPORTED", mc);
  CUmulticastObjectProp mprop;
  memset(&mprop, 0, sizeof mprop);
  mprop.numDevices = 1;
  mprop.size = 2 << 20;
  mprop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t mgran = 0;
  TRY(r, cuMulticastGetGranularity(&mgran, &mprop, CU_MULTICAST_GRANULARITY_MINIMUM));
  printf("%-44s %d %zu\n", "cuMulticastGetGranularity", (int)r, mgran);
  CUmemGenericAllocationHandle mch = 0;
  SHOW("cuMulticastCreate", cuMulticastCreate(&mch, &mprop));

  /* Managed memory range queries, batched prefetch. */
  CUdeviceptr managed = 0;
  cuMemAllocManaged(&managed, 1 << 21, CU_MEM_ATTACH_GLOBAL);
  int value = -7;
  SHOW("cuMemAdvise SET_READ_MOSTLY", cuMemAdvise_v2(managed, 1 << 21, CU_MEM_ADVISE_SET_READ_MOSTLY,
                                                      (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 0}));
  TRY(r, cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 1 << 21));
  printf("%-44s %d %d\n", "RangeGetAttribute READ_MOSTLY", (int)r, value);
  value = -7;
  TRY(r, cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, managed, 1 << 21));
  printf("%-44s %d %d\n", "RangeGetAttribute PREFERRED_LOCATION", (int)r, value);
  int accessed[4] = {-7, -7, -7, -7};
  TRY(r, cuMemRangeGetAttribute(accessed, sizeof accessed, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, 1 << 21));
  printf("%-44s %d %d %d %d %d\n", "RangeGetAttribute ACCESSED_BY", (int)r, accessed[0], accessed[1], accessed[2],
         accessed[3]);
  value = -7;
  TRY(r, cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 1 << 21));
  printf("%-44s %d %d\n", "RangeGetAttribute LAST_PREFETCH_LOCATION", (int)r, value);
  value = -7;
  TRY(r, cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, 1 << 21));
  printf("%-44s %d %d\n", "RangeGetAttribute PREFERRED_LOCATION_TYPE", (int)r, value);
  value = -7;
  TRY(r, cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE, managed, 1 << 21));
  printf("%-44s %d %d\n", "RangeGetAttribute LAST_PREFETCH_LOC_TYPE", (int)r, value);
  TRY(r, cuMemRangeGetAttribute(&value, 3, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, 1 << 21));
  printf("%-44s %d\n", "RangeGetAttribute dataSize 3", (int)r);
  CUdeviceptr plain = 0;
  cuMemAlloc(&plain, 1 << 20);
  TRY(r, cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, plain, 1 << 20));
  printf("%-44s %d\n", "RangeGetAttribute on cuMemAlloc memory", (int)r);
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUdeviceptr ptrs[2] = {managed, managed + (1 << 20)};
  size_t sizes[2] = {1 << 20, 1 << 20};
  size_t idx[1] = {0};
  SHOW("cuMemPrefetchBatchAsync", cuMemPrefetchBatchAsync(ptrs, sizes, 2, &loc, idx, 1, 0, 0));
  SHOW("cuMemDiscardBatchAsync", cuMemDiscardBatchAsync(ptrs, sizes, 2, 0, 0));
  SHOW("cuMemDiscardAndPrefetchBatchAsync", cuMemDiscardAndPrefetchBatchAsync(ptrs, sizes, 2, &loc, idx, 1, 0, 0));
  SHOW("cuStreamSynchronize", cuStreamSynchronize(0));
  value = -7;
  TRY(r, cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed, 1 << 21));
  printf("%-44s %d %d\n", "LAST_PREFETCH_LOCATION after batch", (int)r, value);
  SHOW("cuMemPrefetchBatchAsync on cuMemAlloc", cuMemPrefetchBatchAsync(&plain, sizes, 1, &loc, idx, 1, 0, 0));
  SHOW("cuMemPrefetchBatchAsync count 0", cuMemPrefetchBatchAsync(ptrs, sizes, 0, &loc, idx, 1, 0, 0));

  /* Pointer attributes that are set. */
  unsigned int one = 1;
  SHOW("cuPointerSetAttribute SYNC_MEMOPS device", cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, plain));
  int sync = -1;
  SHOW("cuPointerGetAttribute SYNC_MEMOPS", cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, plain));
  printf("%-44s %d\n", "SYNC_MEMOPS value", sync);
  SHOW("cuPointerSetAttribute SYNC_MEMOPS managed", cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, managed));
  SHOW("cuPointerSetAttribute CONTEXT", cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_CONTEXT, plain));
  SHOW("cuPointerSetAttribute SYNC_MEMOPS bad ptr", cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, 0x1000));
  void* host = NULL;
  cuMemHostAlloc(&host, 4096, 0);
  SHOW("cuPointerSetAttribute SYNC_MEMOPS host", cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                                                                       (CUdeviceptr)host));

  /* Unified functions; cooperative multi-device; dma-buf; logs; async notifications. */
  CUlibrary lib = NULL;
  SHOW("cuLibraryLoadData", cuLibraryLoadData(&lib, kPtx, NULL, NULL, 0, NULL, NULL, 0));
  void* fptr = (void*)1;
  SHOW("cuLibraryGetUnifiedFunction noop", cuLibraryGetUnifiedFunction(&fptr, lib, "noop"));
  SHOW("cuLibraryGetUnifiedFunction missing", cuLibraryGetUnifiedFunction(&fptr, lib, "missing"));
  CUmodule mod = NULL;
  CUfunction fn = NULL;
  cuModuleLoadData(&mod, kPtx);
  cuModuleGetFunction(&fn, mod, "noop");
  CUDA_LAUNCH_PARAMS lp;
  memset(&lp, 0, sizeof lp);
  void* args[1] = {&plain};
  lp.function = fn; lp.gridDimX = lp.gridDimY = lp.gridDimZ = 1; lp.blockDimX = lp.blockDimY = lp.blockDimZ = 1;
  lp.hStream = 0; lp.kernelParams = args;
  SHOW("cuLaunchCooperativeKernelMultiDevice 1", cuLaunchCooperativeKernelMultiDevice(&lp, 1, 0));
  SHOW("cuStreamSynchronize", cuStreamSynchronize(0));
  int fd = -1;
  SHOW("cuMemGetHandleForAddressRange dma_buf", cuMemGetHandleForAddressRange(&fd, plain, 1 << 20,
                                                                              CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0));
  printf("%-44s %d\n", "dma_buf fd", fd);
  CUlogIterator it = 0;
  SHOW("cuLogsCurrent", cuLogsCurrent(&it, 0));
  cuMemFree(0x1234);  /* an error the log should hold */
  char buf[4096];
  size_t size = sizeof buf;
  memset(buf, 0, sizeof buf);
  TRY(r, cuLogsDumpToMemory(&it, buf, &size, 0));
  printf("%-44s %d size=%zu\n---\n%s\n---\n", "cuLogsDumpToMemory", (int)r, size, buf);
  CUasyncCallbackHandle cb = NULL;
  SHOW("cuDeviceRegisterAsyncNotification null fn", cuDeviceRegisterAsyncNotification(dev, NULL, NULL, &cb));
  return 0;
}
