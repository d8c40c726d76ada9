#include "agent/daemon/protobuf_log.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include "agent/common/log_rate_limit.h"

namespace kib::daemon {
namespace {

namespace pb = google::protobuf;

// protobuf's ERROR lines are mostly a client's bad message (already answered
// invalid_argument): worth a warning, not an error of ours.
spdlog::level::level_enum level_of(pb::LogLevel level) {
  switch (level) {
    case pb::LOGLEVEL_INFO: return spdlog::level::info;
    case pb::LOGLEVEL_WARNING:
    case pb::LOGLEVEL_ERROR: return spdlog::level::warn;
    case pb::LOGLEVEL_FATAL: return spdlog::level::critical;
  }
  return spdlog::level::warn;
}

void log_protobuf(pb::LogLevel level, const char* file, int line, const std::string& message) {
  static LogRateLimit limit(10, std::chrono::minutes(1));
  // A FATAL line precedes an abort: it is always written.
  auto verdict = level == pb::LOGLEVEL_FATAL ? LogRateLimit::Verdict{true, 0} : limit.admit(LogRateLimit::Clock::now());
  if (!verdict.log) return;
  if (verdict.suppressed_before > 0)
    spdlog::warn("protobuf: {} more messages were not logged (at most 10 a minute)", verdict.suppressed_before);
  spdlog::log(level_of(level), "protobuf: {} ({}:{})", message, file, line);
}

}  // namespace

void route_protobuf_logs() { pb::SetLogHandler(log_protobuf); }

}  // namespace kib::daemon
