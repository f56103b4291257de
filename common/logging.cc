#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <string>

namespace curelay {

bool ConfigureLogging(std::string_view program, std::string_view level) {
  auto logger = spdlog::stderr_logger_mt(std::string(program) + "-" + std::to_string(getpid()));
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %n [%l] %v");
  spdlog::set_default_logger(logger);
  const auto parsed = spdlog::level::from_str(std::string(level));
  const bool known = parsed != spdlog::level::off || level == "off";
  spdlog::set_level(known ? parsed : spdlog::level::info);
  spdlog::flush_on(spdlog::level::info);
  return known;
}

}  // namespace curelay
