#pragma once
// The IANA IPv4 and IPv6 special-purpose address registries (RFC 6890 and
// successors) as one table, and the check every Egress endpoint address passes: at
// create/update time and again on every dial. The table, its sources and why every
// entry (even "globally reachable" ones) is refused: special_purpose.cpp.
#include <optional>
#include <string>
#include <vector>

#include "agent/policy/ip_address.h"

namespace kib::policy {

struct SpecialPurposeBlock {
  Cidr cidr;
  std::string name;  // e.g. "private-use (RFC 1918)"
};

// The whole registry table (v4 and v6), one data structure.
const std::vector<SpecialPurposeBlock>& special_purpose_table();

// The most specific table block containing a (no unwrapping, no exemptions), or
// nullptr.
const SpecialPurposeBlock* find_special_purpose_block(const IpAddress& a);

class EndpointAddressPolicy {
 public:
  // exemptions: egress.allowed_special_purpose_cidrs from the config.
  explicit EndpointAddressPolicy(std::vector<Cidr> exemptions = {});
  static Result<EndpointAddressPolicy> from_strings(const std::vector<std::string>& cidrs);

  // ok, or invalid_argument naming the address and the block it falls in. IPv4
  // embedded in IPv6 (mapped, compatible, NAT64 64:ff9b::/96) is unwrapped and
  // checked as IPv4; 64:ff9b:1::/48, 2002::/16 and 2001::/32 are refused outright.
  Status check(const IpAddress& a) const;

 private:
  std::vector<Cidr> exemptions_;
};

}  // namespace kib::policy
