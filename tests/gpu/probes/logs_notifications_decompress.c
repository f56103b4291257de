/* GPU-host probe (not product): facts the shim needs before it serves the driver's error log, asynchronous
 * notifications and batched decompression (issue 14's remaining families), measured on the native driver:
 *   - which thread runs a cuLogsRegisterCallback callback, and whether it runs before the failing call returns;
 *   - what cuLogsDumpToMemory answers after one failing call (size, text);
 *   - whether cuDeviceRegisterAsyncNotification takes a real callback on this platform;
 *   - what cuMemBatchDecompressAsync, its device attributes and a decompress-usage pool answer on this GPU;
 *   - whether cuLogsDumpToFile appends or rewrites, what a too-small cuLogsDumpToMemory buffer gets, and whether a
 *     CUDA_ERROR_NOT_READY answer (cuEventQuery of pending work) is logged;
 *   - whether a pool with a usage bit cuda.h does not define is made;
 *   - what the notification calls refuse (no callback, no handle, a bad device, a handle unregistered twice) and
 *     whether allocating most of the GPU's memory raises an over-budget notification.
 * One line per question: NAME result [values]. Run natively and through curelay (the shim's answers come from the
 * executor's driver): the lines should agree, except times and thread ids.
 * Build: gcc -O1 -o logs_probe logs_notifications_decompress.c -I/usr/local/cuda/include \
 *          -L/usr/local/cuda/lib64/stubs -lcuda -lpthread
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long Tid(void) { return (long)syscall(SYS_gettid); }

static volatile long callback_tid = 0;
static volatile int callback_calls = 0;
static volatile int inside_failing_call = 0;
static volatile int called_inside = 0;
static char callback_text[512];

static void CUDA_CB OnLog(void* data, CUlogLevel level, char* message, size_t length) {
  (void)data;
  callback_tid = Tid();
  callback_calls++;
  if (inside_failing_call) called_inside = 1;
  snprintf(callback_text, sizeof callback_text, "level %d len %zu: %.*s", (int)level, length,
           (int)(length < 400 ? length : 400), message);
}

static volatile int notifications = 0;
static volatile unsigned long long notified_over_budget = 0;
static volatile int notified_type = -1;

static void OnNotification(CUasyncNotificationInfo* info, void* user, CUasyncCallbackHandle handle) {
  (void)user; (void)handle;
  notified_type = (int)info->type;
  if (info->type == CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET) notified_over_budget = info->info.overBudget.bytesOverBudget;
  notifications++;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0); /* every line out before a crash of the driver's */
  CUresult r = cuInit(0);
  printf("cuInit %d\n", (int)r);
  CUdevice device;
  CUcontext context;
  cuDeviceGet(&device, 0);
  cuDevicePrimaryCtxRetain(&context, device);
  cuCtxSetCurrent(context);

  /* Logs: a callback, a mark, one failing call, then a dump from the mark. */
  CUlogsCallbackHandle log_handle = NULL;
  r = cuLogsRegisterCallback(OnLog, NULL, &log_handle);
  printf("cuLogsRegisterCallback %d\n", (int)r);
  CUlogIterator mark = 0;
  r = cuLogsCurrent(&mark, 0);
  printf("cuLogsCurrent %d mark %u\n", (int)r, (unsigned)mark);
  inside_failing_call = 1;
  r = cuMemFree((CUdeviceptr)0x1234);
  inside_failing_call = 0;
  usleep(200000); /* an asynchronous callback has time to run */
  printf("failing cuMemFree %d; callback calls %d, on the caller's thread %s, before the call returned %s\n", (int)r,
         callback_calls, callback_tid == Tid() ? "yes" : (callback_tid == 0 ? "none" : "no"),
         called_inside ? "yes" : "no");
  printf("callback text: %s\n", callback_text);
  char buffer[4096];
  size_t size = sizeof buffer;
  CUlogIterator from = mark;
  r = cuLogsDumpToMemory(&from, buffer, &size, 0);
  printf("cuLogsDumpToMemory %d size %zu iterator %u -> %u strlen %zu\n", (int)r, size, (unsigned)mark,
         (unsigned)from, r == CUDA_SUCCESS ? strlen(buffer) : 0);
  if (r == CUDA_SUCCESS) printf("dump: %s\n", buffer);
  size = 8;
  from = mark;
  memset(buffer, 'X', sizeof buffer);
  r = cuLogsDumpToMemory(&from, buffer, &size, 0);
  size_t written = 0;
  while (written < sizeof buffer && buffer[written] != 'X') written++;
  printf("cuLogsDumpToMemory small-buffer %d size %zu bytes-written %zu\n", (int)r, size, written);
  char path[] = "/tmp/curelay-logs-probe-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  from = mark;
  r = cuLogsDumpToFile(&from, path, 0);
  FILE* file = fopen(path, "r");
  fseek(file, 0, SEEK_END);
  long first = ftell(file);
  fclose(file);
  from = mark;
  CUresult again = cuLogsDumpToFile(&from, path, 0);
  file = fopen(path, "r");
  fseek(file, 0, SEEK_END);
  long second = ftell(file);
  fclose(file);
  unlink(path);
  printf("cuLogsDumpToFile %d then %d: file bytes %ld then %ld (%s)\n", (int)r, (int)again, first, second,
         second == 2 * first ? "appends" : second == first ? "rewrites" : "other");
  size = sizeof buffer;
  r = cuLogsDumpToMemory(NULL, buffer, &size, 0);
  printf("cuLogsDumpToMemory null-iterator %d size %zu\n", (int)r, size);
  r = cuLogsDumpToMemory(&from, buffer, &size, 1);
  printf("cuLogsDumpToMemory flags-1 %d\n", (int)r);
  /* A NOT_READY answer: a stream held at a value wait, an event behind it, queried. */
  {
    unsigned int* flag = NULL;
    CUdeviceptr flag_device = 0;
    CUstream stream = NULL;
    CUevent event = NULL;
    cuMemHostAlloc((void**)&flag, sizeof *flag, CU_MEMHOSTALLOC_DEVICEMAP);
    *flag = 0;
    cuMemHostGetDevicePointer(&flag_device, flag, 0);
    cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
    CUresult waited = cuStreamWaitValue32(stream, flag_device, 1, CU_STREAM_WAIT_VALUE_GEQ);
    cuEventRecord(event, stream);
    int before = callback_calls;
    CUresult queried = cuEventQuery(event);
    int after = callback_calls;
    *(volatile unsigned int*)flag = 1;
    CUresult synced = cuStreamSynchronize(stream);
    printf("cuEventQuery pending %d (wait %d, then sync %d); callbacks for it %d\n", (int)queried, (int)waited,
           (int)synced, after - before);
    cuEventDestroy(event);
    cuStreamDestroy(stream);
    cuMemFreeHost(flag);
  }
  r = cuLogsUnregisterCallback(log_handle);
  printf("cuLogsUnregisterCallback %d\n", (int)r);

  /* Asynchronous notifications with a real callback. */
  CUasyncCallbackHandle notification = NULL;
  r = cuDeviceRegisterAsyncNotification(device, OnNotification, NULL, &notification);
  printf("cuDeviceRegisterAsyncNotification %d\n", (int)r);
  if (r == CUDA_SUCCESS) {
    printf("cuDeviceUnregisterAsyncNotification %d\n", (int)cuDeviceUnregisterAsyncNotification(device, notification));
  } else {
    printf("cuDeviceUnregisterAsyncNotification not-registered\n");
  }

  /* Decompression: the attributes, a decompress-usage pool, and one call on plain device memory. */
  int mask = -1, longest = -1;
  r = cuDeviceGetAttribute(&mask, CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK, device);
  printf("attribute MEM_DECOMPRESS_ALGORITHM_MASK %d value %d\n", (int)r, mask);
  r = cuDeviceGetAttribute(&longest, CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH, device);
  printf("attribute MEM_DECOMPRESS_MAXIMUM_LENGTH %d value %d\n", (int)r, longest);
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  props.usage = CU_MEM_POOL_CREATE_USAGE_HW_DECOMPRESS;
  CUmemoryPool pool = NULL;
  r = cuMemPoolCreate(&pool, &props);
  printf("cuMemPoolCreate usage=HW_DECOMPRESS %d\n", (int)r);
  if (r == CUDA_SUCCESS) cuMemPoolDestroy(pool);
  props.usage = 0x8000;
  pool = NULL;
  r = cuMemPoolCreate(&pool, &props);
  printf("cuMemPoolCreate usage=0x8000 %d\n", (int)r);
  if (r == CUDA_SUCCESS) cuMemPoolDestroy(pool);
  CUdeviceptr src = 0, dst = 0, actual = 0;
  cuMemAlloc(&src, 4096);
  cuMemAlloc(&dst, 4096);
  cuMemAlloc(&actual, 4);
  CUmemDecompressParams params;
  memset(&params, 0, sizeof params);
  params.srcNumBytes = 16;
  params.dstNumBytes = 4096;
  params.dstActBytes = (cuuint32_t*)actual;
  params.src = (const void*)src;
  params.dst = (void*)dst;
  params.algo = CU_MEM_DECOMPRESS_ALGORITHM_DEFLATE;
  size_t error_index = 12345;
  r = cuMemBatchDecompressAsync(&params, 1, 0, &error_index, NULL);
  CUresult synced = cuCtxSynchronize();
  printf("cuMemBatchDecompressAsync %d errorIndex %zu; then cuCtxSynchronize %d\n", (int)r, error_index, (int)synced);
  r = cuMemBatchDecompressAsync(&params, 0, 0, &error_index, NULL);
  printf("cuMemBatchDecompressAsync count-0 %d\n", (int)r);

  /* Notifications: refusals, then most of the GPU's memory allocated while one is registered; last, a handle
   * unregistered twice (the driver may not survive it). */
  CUasyncCallbackHandle refused = NULL;
  printf("cuDeviceRegisterAsyncNotification no-callback %d\n",
         (int)cuDeviceRegisterAsyncNotification(device, NULL, NULL, &refused));
  printf("cuDeviceRegisterAsyncNotification bad-device %d\n",
         (int)cuDeviceRegisterAsyncNotification(9999, OnNotification, NULL, &refused));
  r = cuDeviceRegisterAsyncNotification(device, OnNotification, NULL, &notification);
  printf("cuDeviceRegisterAsyncNotification again %d\n", (int)r);
  if (r == CUDA_SUCCESS) {
    size_t free_bytes = 0, total_bytes = 0;
    cuMemGetInfo(&free_bytes, &total_bytes);
    CUdeviceptr most = 0;
    CUresult allocated = cuMemAlloc(&most, free_bytes / 10 * 9);
    usleep(300000);
    printf("notifications after allocating 90%% of free memory: alloc %d, %d notifications, type %d\n",
           (int)allocated, notifications, notified_type);
    if (allocated == CUDA_SUCCESS) cuMemFree(most);
    printf("cuDeviceUnregisterAsyncNotification bad-device %d\n",
           (int)cuDeviceUnregisterAsyncNotification(9999, notification));
    printf("cuDeviceUnregisterAsyncNotification %d\n", (int)cuDeviceUnregisterAsyncNotification(device, notification));
    printf("cuDeviceUnregisterAsyncNotification twice %d\n",
           (int)cuDeviceUnregisterAsyncNotification(device, notification));
  }
  printf("cuDeviceRegisterAsyncNotification no-handle %d\n",
         (int)cuDeviceRegisterAsyncNotification(device, OnNotification, NULL, NULL));
  return 0;
}
