#include "agent/ctl/duration_arg.h"

#include <charconv>
#include <string>

namespace kib::ctl {

Result<uint32_t> parse_timeout_seconds(std::string_view v) {
  const Error bad{
      Code::invalid_argument,
      "--timeout must be seconds or a duration such as 30s, 2m, 1h (1s to 24h), not '" + std::string(v) + "'"};
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p == v.data()) return bad;
  const std::string_view unit(p, static_cast<size_t>(v.data() + v.size() - p));
  uint64_t scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  if (unit == "m") scale = 60;
  if (unit == "h") scale = 3600;
  if (scale == 0 || n == 0 || n > 86400 || n * scale > 86400) return bad;
  return static_cast<uint32_t>(n * scale);
}

}  // namespace kib::ctl
