#pragma once
// An IPv4 or IPv6 address and CIDR prefixes over them.
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/common/result.h"

namespace kib::policy {

struct IpAddress {
  int family = AF_INET;             // AF_INET or AF_INET6
  std::array<uint8_t, 16> bytes{};  // network order; IPv4 uses the first 4

  static Result<IpAddress> parse(std::string_view text);  // "192.0.2.1", "2001:db8::1" (no brackets)
  static IpAddress from_sockaddr(const sockaddr* sa);
  std::string to_string() const;
  size_t bit_length() const { return family == AF_INET ? 32 : 128; }
  bool operator==(const IpAddress&) const = default;
};

struct Cidr {
  IpAddress base;  // host bits zero
  uint8_t prefix_len = 0;

  // "10.0.0.0/8", "2001:db8::/32"; a bare address is a /32 or /128. Host bits set
  // are invalid_argument (an operator's typo must not silently widen a range).
  static Result<Cidr> parse(std::string_view text);
  bool contains(const IpAddress& a) const;  // false across families
  std::string to_string() const;
};

// ::ffff:a.b.c.d -> a.b.c.d (what a dual-stack socket reports for an IPv4 peer);
// any other address unchanged.
IpAddress unmap_v4(const IpAddress& a);

}  // namespace kib::policy
