// The shim's logger: spdlog (header-only, hidden inside the shim) writing to stderr with a "curelay" prefix.
// It is the shim's own instance and never touches an spdlog the application may bring.
#pragma once

#include <spdlog/spdlog.h>

namespace curelay::frontend {

spdlog::logger& Log();

}  // namespace curelay::frontend
