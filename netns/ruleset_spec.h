#pragma once
// What the agent's nftables table in a Workspace namespace must enforce: the
// policy's coverage (in its order), DNS interception, the mode, and where TPROXY
// delivers. Plain values, so the ruleset text can be built and tested without
// privileges.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agent/common/result.h"

namespace kib::netns {

// An IPv4 or IPv6 prefix with host bits zero.
struct Prefix {
  int family = 0;                  // AF_INET or AF_INET6
  std::array<uint8_t, 16> addr{};  // network order; IPv4 uses the first 4 bytes
  uint8_t length = 0;

  // "10.0.0.0/8", "2001:db8::/32"; a bare address is a host prefix. Host bits set
  // are invalid_argument.
  static Result<Prefix> parse(std::string_view text);
  std::string to_string() const;  // canonical text (inet_ntop)
  bool contains(const Prefix& other) const;
  auto operator<=>(const Prefix&) const = default;
};

struct PortRange {
  uint16_t first = 1;
  uint16_t last = 65535;
};

// One NetworkPolicy.egresses entry: covers a destination when one of its prefixes
// contains the address and one of its port ranges the port (empty = all ports).
struct CoveredRoute {
  std::vector<Prefix> destinations;
  std::vector<PortRange> ports;
};

enum class NetworkMode { isolated, public_internet };

struct RulesetPolicy {
  NetworkMode mode = NetworkMode::isolated;
  std::vector<CoveredRoute> routes;  // ignored in isolated mode: nothing leaves
  bool intercept_dns = false;        // the policy has resolvers

  // Whether the table built from this policy sends a new TCP connection to
  // host:port to the agent (tproxy): a covered route in public_internet mode, or DNS
  // when intercepted. host is a host prefix.
  bool intercepts_tcp(const Prefix& host, uint16_t port) const;
  // Whether every TCP destination and port `before` intercepts is intercepted here
  // too. Sufficient, not exact: true only when each of before's (prefix, ports)
  // entries lies within one entry here; false may be a superset written otherwise.
  bool covers_all_of(const RulesetPolicy& before) const;
};

// Ports of the transparent listeners in the namespace. 0 means "no listener yet":
// the matching traffic is dropped (fail closed while a namespace is set up).
struct TproxyPorts {
  uint16_t tcp = 0;
  uint16_t dns_udp = 0;
  uint16_t dns_tcp = 0;
  bool operator==(const TproxyPorts&) const = default;
};

struct RulesetParams {
  RulesetPolicy policy;
  TproxyPorts ports;
  uint32_t mark = 0;  // fwmark that routes intercepted packets to the local table
};

}  // namespace kib::netns
