#pragma once
// The policy routing TPROXY needs in a Workspace namespace: packets carrying the
// agent's fwmark are looked up in a table whose only route is `local default dev lo`,
// so they are delivered to the transparent listener instead of being forwarded.
// Installed and removed with libnl over a netlink socket opened in the namespace.
#include <cstdint>

#include "agent/common/result.h"

namespace kib::netns {

struct RoutingParams {
  uint32_t mark = 0;
  uint32_t table = 0;
  uint32_t priority = 0;  // of the fwmark rule
};

// Brings lo up, adds `fwmark MARK lookup TABLE` (v4 and v6; kept when already
// there) and `local 0.0.0.0/0 dev lo table TABLE` / `local ::/0` (replaced when
// present). Idempotent.
Status install_policy_routing(int ns_fd, const RoutingParams& params);

// failed_precondition when the fwmark rule or the local route of either family is
// missing (someone flushed them): what the kernel enforces is not what we installed.
Status check_policy_routing(int ns_fd, const RoutingParams& params);

// Removes exactly what install_policy_routing added (not lo's state). Idempotent.
Status remove_policy_routing(int ns_fd, const RoutingParams& params);

}  // namespace kib::netns
