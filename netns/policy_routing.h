#pragma once
// The policy routing TPROXY needs in a Workspace namespace: packets carrying the
// agent's fwmark are looked up in a table whose only route is `local default dev lo`,
// so they are delivered to the transparent listener instead of being forwarded.
// Installed and removed with libnl over a netlink socket opened in the namespace.
//
// Per address family, as far as the namespace carries it. A family is *live* when
// the kernel would carry its traffic there: IPv4 always (Linux has no switch that
// turns it off in a namespace); IPv6 when the kernel has IPv6 and at least one
// interface of the namespace, lo included, has `net.ipv6.conf.IF.disable_ipv6 = 0`.
// The per-interface value is what the kernel consults when it sends or receives;
// `all` and `default` are only written through to the interfaces, so a guest with
// `all.disable_ipv6 = 1` and no interface enabled since sends no IPv6 at all. A
// family that is not live is not installed (there is nothing to intercept, and the
// kernel refuses a route on lo while IPv6 is off there); a live one is. IPv6 live on
// an interface but off on lo cannot be enforced (the local route hangs on lo): that
// is an error, and the nftables table keeps dropping covered IPv6 traffic.
#include <cstdint>
#include <string>
#include <vector>

#include "agent/common/result.h"

namespace kib::netns {

struct RoutingParams {
  uint32_t mark = 0;
  uint32_t table = 0;
  uint32_t priority = 0;  // of the fwmark rule
};

struct Families {
  bool ipv4 = false;
  bool ipv6 = false;
  bool operator==(const Families&) const = default;
};

// "ipv4", "ipv6" for the families set, in that order.
std::vector<std::string> family_names(Families families);

// What install_policy_routing left in a namespace, what check_policy_routing
// compares the kernel with.
struct RoutingState {
  Families enforced;  // families whose rule and local route are in place
  // Live families the namespace's own settings keep from being enforced (IPv6 on an
  // interface but off on lo); reported once, not retried until the settings change.
  Families blocked;
};

struct RoutingInstall {
  RoutingState state;
  // ok, or why a live family is not enforced (the others are).
  Status status;
};

// Brings lo up, adds `fwmark MARK lookup TABLE` (kept when already there) and
// `local 0.0.0.0/0 dev lo table TABLE` / `local ::/0` (replaced when present) for
// each live family. Idempotent.
RoutingInstall install_policy_routing(int ns_fd, const RoutingParams& params);

// The same in the calling thread's namespace, but a family whose rule and local route
// are there already is left as it is: reads first, writes only what is missing. For a
// namespace adopted after a restart, where everything is usually in place: a write
// would notify every route watcher of the host (one per attached namespace).
RoutingInstall ensure_policy_routing_here(const RoutingParams& params);

// failed_precondition when what the kernel enforces is not `installed`: the fwmark
// rule or the local route of an enforced family is missing (someone flushed them, or
// IPv6 was turned off on lo), a family became live or stopped being live since, a
// blocked family's settings changed, or a live family failed to install before (so
// that a repair retries it). install_policy_routing then puts the namespace in order.
Status check_policy_routing(int ns_fd, const RoutingParams& params, const RoutingState& installed);

// Removes exactly what install_policy_routing added, both families whether live or
// not (not lo's state). Idempotent.
Status remove_policy_routing(int ns_fd, const RoutingParams& params);

}  // namespace kib::netns
