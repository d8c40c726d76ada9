#pragma once
// The kernel-facing view of a NetworkPolicy message: mode, coverage in order, and
// whether DNS is intercepted. Egress ids do not matter to the kernel: every covered
// connection reaches the same listener and the data plane picks the Egress.
#include "agent/common/result.h"
#include "kibotos/ctrl/v1/workspace.pb.h"
#include "netns/ruleset_spec.h"

namespace kib::netns {

// invalid_argument for an unspecified mode, a bad CIDR or a bad port range.
Result<RulesetPolicy> ruleset_policy_from_proto(const ::kibotos::ctrl::v1::NetworkPolicy& policy);

}  // namespace kib::netns
