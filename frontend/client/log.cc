#include "frontend/client/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include "frontend/client/config.h"

namespace curelay::frontend {

spdlog::logger& Log() {
  static spdlog::logger* logger = [] {
    auto* created = new spdlog::logger("curelay", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    created->set_pattern("curelay[%P] %l: %v");
    const std::string level = ReadConfig().log_level;
    const auto parsed = spdlog::level::from_str(level);
    created->set_level(parsed == spdlog::level::off && level != "off" ? spdlog::level::warn : parsed);
    created->flush_on(spdlog::level::trace);
    return created;  // never destroyed: the shim may log from atexit handlers of the application
  }();
  return *logger;
}

}  // namespace curelay::frontend
