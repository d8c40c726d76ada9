#include "agent/daemon/json_log_formatter.h"

#include <spdlog/details/log_msg.h>

#include <chrono>
#include <ctime>

#include "agent/common/json_string.h"

namespace kib::daemon {
namespace {

void append(spdlog::memory_buf_t& dest, std::string_view s) { dest.append(s.data(), s.data() + s.size()); }

}  // namespace

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  using namespace std::chrono;
  const auto since_epoch = msg.time.time_since_epoch();
  const std::time_t secs = duration_cast<seconds>(since_epoch).count();
  const auto millis = duration_cast<milliseconds>(since_epoch).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[96];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(millis));
  append(dest, "{\"time\":\"");
  append(dest, ts);
  append(dest, "\",\"level\":");
  const auto level = spdlog::level::to_string_view(msg.level);
  kib::append_json_string(dest, std::string_view(level.data(), level.size()));
  append(dest, ",\"msg\":");
  kib::append_json_string(dest, std::string_view(msg.payload.data(), msg.payload.size()));
  append(dest, "}\n");
}

}  // namespace kib::daemon
