#pragma once
// host:port of an Egress endpoint or a resolver.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agent/policy/ip_address.h"

namespace kib::policy {

struct HostPort {
  std::string host;             // hostname, or the IP literal without brackets
  uint16_t port = 0;            // 1..65535
  std::optional<IpAddress> ip;  // set when host is an IP literal
};

// "203.0.113.5:1080", "[2001:db8::1]:1080", "socks.example.com:1080". Hostnames follow
// RFC 1123 (<= 253 bytes, labels <= 63). invalid_argument otherwise, with a message
// that names the problem.
Result<HostPort> parse_host_port(std::string_view text);
// Like parse_host_port but the host must be an IP literal (resolver addresses).
Result<HostPort> parse_ip_port(std::string_view text);

}  // namespace kib::policy
