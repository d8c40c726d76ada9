#include "agent/daemon/protobuf_log.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

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

LogRateLimit::Verdict LogRateLimit::admit(Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (in_window_ == 0 || now - window_start_ >= window_) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= burst_) {
    ++suppressed_;
    return {};
  }
  ++in_window_;
  Verdict v{true, suppressed_};
  suppressed_ = 0;
  return v;
}

void route_protobuf_logs() { pb::SetLogHandler(log_protobuf); }

}  // namespace kib::daemon
