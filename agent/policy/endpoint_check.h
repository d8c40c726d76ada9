#pragma once
// The two uses of the special-purpose check on an Egress endpoint: once at
// create/update time, and on every dial (issue 5: "connect only to an address that
// passed the check, never resolving again in between").
#include <functional>
#include <string>
#include <vector>

#include "agent/policy/endpoint.h"
#include "agent/policy/name_resolver.h"
#include "agent/policy/special_purpose.h"

namespace kib::policy {

// Resolves a host name once, as resolve_host does: an empty vector means "does not
// resolve", an Error means the resolver itself could not run. A seam for tests.
using HostResolver = std::function<Result<std::vector<IpAddress>>(const std::string& host)>;

// Create/update time (the one implementation CreateEgress and UpdateEgress use). An
// IP literal must pass the policy and is never resolved. A host name is resolved
// once: "a hostname that resolves into [a special-purpose range] when the server
// resolves it once, is invalid_argument". One that does not resolve is accepted, and
// so is one the resolver could not run for: "That check only reports a mistake
// early: the endpoint is checked again on every dial."
Status check_endpoint_address(const HostPort& endpoint, const EndpointAddressPolicy& policy,
                              const HostResolver& resolve);
// The same through c-ares (resolve_host), blocking for at most options.timeout.
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
