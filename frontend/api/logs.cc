// The driver's error log (cuLogs*): answered in the process from frontend/client/driver_log.h, which holds what the
// executor's driver raised during this process's calls. No round trip, and no session needed, as natively.
// `flags` is reserved; the driver ignores it (measured on the H200: cuLogsDumpToMemory with flags 1 succeeds), and
// so does the shim.
#include "frontend/api/api_support.h"
#include "frontend/client/driver_log.h"

using namespace curelay::frontend;

extern "C" {

CUresult cuLogsRegisterCallback(CUlogsCallback callbackFunc, void* userData, CUlogsCallbackHandle* callback_out) {
  return DriverLog::OfProcess().Register(callbackFunc, userData, callback_out);
}

CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback) {
  return DriverLog::OfProcess().Unregister(callback);
}

CUresult cuLogsCurrent(CUlogIterator* iterator_out, unsigned int flags) {
  (void)flags;
  if (iterator_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *iterator_out = DriverLog::OfProcess().Current();
  return CUDA_SUCCESS;
}

CUresult cuLogsDumpToFile(CUlogIterator* iterator, const char* pathToFile, unsigned int flags) {
  (void)flags;
  return DriverLog::OfProcess().DumpToFile(iterator, pathToFile);
}

CUresult cuLogsDumpToMemory(CUlogIterator* iterator, char* buffer, size_t* size, unsigned int flags) {
  (void)flags;
  return DriverLog::OfProcess().DumpToMemory(iterator, buffer, size);
}

}  // extern "C"
