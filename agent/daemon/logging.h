#pragma once
// spdlog to stderr (journald adds its own timestamps to it), as text or JSON lines.
#include <string>

namespace kib::daemon {

// level: trace|debug|info|warn|error|critical|off; format: text|json (validated by
// the config parser).
void setup_logging(const std::string& level, const std::string& format);

}  // namespace kib::daemon
