#pragma once
// The two uses of the special-purpose check on an Egress endpoint: once at
// create/update time, and on every dial (issue 5: "connect only to an address that
// passed the check, never resolving again in between").
#include <string>
#include <vector>

#include "agent/policy/endpoint.h"
#include "agent/policy/name_resolver.h"
#include "agent/policy/special_purpose.h"

namespace kib::policy {

// Create/update time. An IP literal must pass the policy. A host name is resolved
// once (blocking the caller for at most options.timeout): "if any address it
// resolves to is special-purpose, invalid_argument; if it does not resolve, it is
// accepted (the dial checks again)". Resolver failures (not "no answer") are
// returned as they are.
Status check_endpoint_address(const HostPort& endpoint, const EndpointAddressPolicy& policy,
                              const ResolverOptions& options);

// Dial time: the resolved addresses split into those that may be dialed (in the
// resolver's order) and the refusals (one invalid_argument per refused address).
struct DialTargets {
  std::vector<IpAddress> allowed;
  std::vector<Error> refused;
};
DialTargets filter_dial_targets(const std::vector<IpAddress>& resolved, const EndpointAddressPolicy& policy);

}  // namespace kib::policy
