#include "agent/daemon/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "agent/daemon/json_log_formatter.h"
#include "agent/daemon/protobuf_log.h"

namespace kib::daemon {

void setup_logging(const std::string& level, const std::string& format) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  if (format == "json")
    sink->set_formatter(std::make_unique<JsonLogFormatter>());
  else
    sink->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");
  auto logger = std::make_shared<spdlog::logger>("kibotos-agent", sink);
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::trace);  // lines reach journald/tests as they happen
  spdlog::set_default_logger(logger);
  route_protobuf_logs();
}

}  // namespace kib::daemon
