#include "agent/config/config_scalars.h"

#include <arpa/inet.h>

#include <charconv>

namespace kib::config {
namespace {

Error bad(std::string message) { return Error{Code::invalid_argument, std::move(message)}; }

// The unit suffix's length in milliseconds, 0 if unknown.
int64_t unit_ms(std::string_view unit) {
  if (unit == "ms") return 1;
  if (unit == "s") return 1000;
  if (unit == "m") return 60 * 1000;
  if (unit == "h") return 3600 * 1000;
  if (unit == "d") return 24 * 3600 * 1000;
  return 0;
}

bool is_ip(std::string_view text) {
  std::string s(text);
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

Result<uint64_t> parse_port(std::string_view text) {
  auto r = parse_uint(text, 1, 65535);
  if (!r.ok()) return bad("expected a port 1..65535");
  return r;
}

}  // namespace

Result<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < min || v > max)
    return bad("expected an integer from " + std::to_string(min) + " to " + std::to_string(max));
  return v;
}

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  const Error err = bad("expected a duration like \"90s\", \"90m\", \"24h\" or a number of seconds");
  if (text.empty()) return err;
  if (text.find_first_not_of("0123456789") == std::string_view::npos) {
    auto n = parse_uint(text, 0, 100ull * 365 * 24 * 3600);
    if (!n.ok()) return err;
    return std::chrono::milliseconds(*n * 1000);
  }
  int64_t total = 0;
  while (!text.empty()) {
    size_t digits = text.find_first_not_of("0123456789");
    if (digits == 0 || digits == std::string_view::npos) return err;
    size_t unit_end = text.find_first_of("0123456789", digits);
    if (unit_end == std::string_view::npos) unit_end = text.size();
    int64_t mult = unit_ms(text.substr(digits, unit_end - digits));
    auto n = parse_uint(text.substr(0, digits), 0, 1000000000);
    if (mult == 0 || !n.ok()) return err;
    total += static_cast<int64_t>(*n) * mult;
    if (total > 100ll * 365 * 24 * 3600 * 1000) return err;
    text.remove_prefix(unit_end);
  }
  return std::chrono::milliseconds(total);
}

Result<uint32_t> parse_octal_mode(std::string_view text) {
  const Error err = bad("expected an octal mode like 0660");
  if (text.starts_with("0o") || text.starts_with("0O")) text.remove_prefix(2);
  if (text.empty() || text.size() > 5) return err;
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 8);
  if (ec != std::errc() || end != text.data() + text.size() || v > 07777) return err;
  return v;
}

Status check_host_port(std::string_view text) {
  const Error err = bad("expected \"host:port\" or \"[ipv6]:port\"");
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return err;
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']' || !is_ip(host.substr(1, host.size() - 2))) return err;
  } else if (host.find(':') != std::string_view::npos) {
    return err;  // a bare IPv6 address needs brackets
  }
  if (!parse_port(text.substr(colon + 1)).ok()) return err;
  return {};
}

Status check_ip_maybe_port(std::string_view text) {
  if (is_ip(text)) return {};
  const Error err = bad("expected an IP address, \"ip:port\" or \"[ipv6]:port\"");
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return err;
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return err;
    host = host.substr(1, host.size() - 2);
    if (host.find(':') == std::string_view::npos) return err;
  } else if (host.find(':') != std::string_view::npos) {
    return err;
  }
  if (!is_ip(host) || !parse_port(text.substr(colon + 1)).ok()) return err;
  return {};
}

}  // namespace kib::config
