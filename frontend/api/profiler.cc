// Profiler control (cudaProfiler.h): the session's GPU work runs in the executor, so that is where the start and
// stop go, for a profiling tool attached there. cuProfilerInitialize (deprecated since CUDA 11, configuration and
// output files of the old command-line profiler) is forwarded too, and its answer is the executor driver's: the files
// it names are paths on the GPU host.
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

CUresult cuProfilerInitialize(const char* configFile, const char* outputFile, CUoutput_mode outputMode) {
  Client* client;
  CURELAY_RETURN_IF_ERROR(RequireContext(&client));
  auto& builder = Builder();
  const auto config_file = configFile != nullptr ? builder.CreateString(configFile) : 0;
  const auto output_file = outputFile != nullptr ? builder.CreateString(outputFile) : 0;
  const auto call = wire::CreateProfilerInitialize(builder, config_file, output_file, outputMode).Union();
  return client->Call(builder, wire::Call::ProfilerInitialize, call, {}, nullptr);
}

}  // extern "C"
