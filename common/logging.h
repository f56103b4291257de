// Process-wide logging setup for curelay's own processes (backend, executor, tools): spdlog to stderr with the
// program name and pid on every line, at a level from the command line or CURELAY_LOG_LEVEL.
#pragma once

#include <string_view>

namespace curelay {

// Returns false (and keeps "info") when `level` is not one of trace, debug, info, warn, error, critical, off.
bool ConfigureLogging(std::string_view program, std::string_view level);

}  // namespace curelay
