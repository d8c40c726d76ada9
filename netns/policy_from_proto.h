#pragma once
// The kernel-facing view of a NetworkPolicy: mode, coverage in order, and whether DNS
// is intercepted. Egress ids do not matter to the kernel: every covered connection
// reaches the same listener and the data plane picks the Egress (RouteMatcher).
#include <vector>

#include "agent/common/result.h"
#include "agent/policy/route_matcher.h"
#include "kibotos/ctrl/v1/workspace.pb.h"
#include "netns/ruleset_spec.h"

namespace kib::netns {

// Validates through policy::RouteMatcher::compile (the same rules the data plane
// matches with): invalid_argument for an unspecified mode, a bad CIDR or port range.
Result<RulesetPolicy> ruleset_policy_from_proto(const ::kibotos::ctrl::v1::NetworkPolicy& policy);

// One compiled route as the table covers it.
CoveredRoute covered_route(const policy::CompiledRoute& route);

}  // namespace kib::netns
