#pragma once
// Which entry of NetworkPolicy.egresses covers a destination: "a new TCP connection
// goes through the first entry that covers its destination".
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/policy/ip_address.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::policy {

struct PortSpan {
  uint16_t first = 1;
  uint16_t last = 65535;
};

struct CompiledRoute {
  std::string egress_id;
  std::vector<Cidr> destinations;
  std::vector<PortSpan> ports;  // empty = all ports
};

// A validated, parsed policy's routes, in order.
class RouteMatcher {
 public:
  // invalid_argument for a bad CIDR or port range (first > last, 0, > 65535), naming
  // the entry index.
  static Result<RouteMatcher> compile(const ::kibotos::ctrl::v1::NetworkPolicy& policy);
  // Index of the first covering entry, or nullopt when uncovered. Families never
  // mix; an IPv4-mapped IPv6 destination is matched as its IPv4 address.
  std::optional<size_t> match(const IpAddress& dst, uint16_t port) const;
  const std::vector<CompiledRoute>& routes() const { return routes_; }

 private:
  std::vector<CompiledRoute> routes_;
};

}  // namespace kib::policy
