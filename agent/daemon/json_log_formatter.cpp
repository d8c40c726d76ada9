#include "agent/daemon/json_log_formatter.h"

#include <spdlog/details/log_msg.h>

#include <chrono>
#include <ctime>

namespace kib::daemon {
namespace {

void append(spdlog::memory_buf_t& dest, std::string_view s) { dest.append(s.data(), s.data() + s.size()); }

// JSON string escaping (RFC 8259 section 7): quotes, backslash and control bytes.
void append_json_string(spdlog::memory_buf_t& dest, std::string_view s) {
  append(dest, "\"");
  for (unsigned char c : s) {
    switch (c) {
      case '"': append(dest, "\\\""); break;
      case '\\': append(dest, "\\\\"); break;
      case '\n': append(dest, "\\n"); break;
      case '\r': append(dest, "\\r"); break;
      case '\t': append(dest, "\\t"); break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          append(dest, buf);
        } else {
          dest.push_back(static_cast<char>(c));
        }
    }
  }
  append(dest, "\"");
}

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
  append_json_string(dest, std::string_view(level.data(), level.size()));
  append(dest, ",\"msg\":");
  append_json_string(dest, std::string_view(msg.payload.data(), msg.payload.size()));
  append(dest, "}\n");
}

}  // namespace kib::daemon
