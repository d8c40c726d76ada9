#pragma once
// Parsers for the scalar forms the config accepts (durations, octal modes, bounded
// integers, host:port). Each returns a message without the key; the caller names it.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::config {

// "1500ms", "90s", "90m", "24h", "7d", "1h30m", or a bare number of seconds.
Result<std::chrono::milliseconds> parse_duration(std::string_view text);
// "0660", "660", "0o660": permission bits only (at most 07777).
Result<uint32_t> parse_octal_mode(std::string_view text);
// A decimal integer in [min, max].
Result<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max);
// "host:port" or "[v6]:port" with port 1..65535 (the TLS listen address).
Status check_host_port(std::string_view text);
// "ip" or "ip:port" / "[v6]:port" with a literal IP (a resolver address).
Status check_ip_maybe_port(std::string_view text);

}  // namespace kib::config
