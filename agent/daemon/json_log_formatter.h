#pragma once
// log.format: json — one JSON object per line: {"time":…,"level":…,"msg":…}.
#include <spdlog/formatter.h>

#include <memory>

namespace kib::daemon {

class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonLogFormatter>(); }
};

}  // namespace kib::daemon
