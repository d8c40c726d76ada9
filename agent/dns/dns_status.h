#pragma once
// A workspace's DNS status as operators see it: network_policy_status.dns in the API,
// and one line for logs.
#include <string>

#include "agent/dns/workspace_dns.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::dns {

// Sets status.dns from `dns` when the policy has resolvers (else leaves it unset), and
// copies each resolver's last error to the egresses[] entry of its Egress when that
// entry has no error of its own (where operators look for an Egress's trouble).
void add_dns_status(const WorkspaceDnsStatus& dns, ::kibotos::ctrl::v1::NetworkPolicyStatus& status);

// One line for logs: counters, failures by reason, in flight / cap, and each
// resolver's channel state and last error.
std::string describe_dns_status(const WorkspaceDnsStatus& dns);

}  // namespace kib::dns
