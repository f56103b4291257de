// Profiler control (cudaProfiler.h): the session's GPU work runs in the executor, so that is where the start and
// stop go, for a profiling tool attached there. cuProfilerInitialize (deprecated, output files of the old command-line
// profiler) is not forwarded.
#include <cudaProfiler.h>

#include "frontend/api/api_support.h"

using namespace curelay;
using namespace curelay::frontend;

namespace {

CUresult ControlProfiler(bool start) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  auto& builder = Builder();
  const auto call = wire::CreateProfilerControl(builder, start).Union();
  return client->Post(builder, wire::Call::ProfilerControl, call, {});
}

}  // namespace

extern "C" {

CUresult cuProfilerStart(void) { return ControlProfiler(true); }
CUresult cuProfilerStop(void) { return ControlProfiler(false); }

}  // extern "C"
