#pragma once
// The text of the agent's nftables table ("table inet kibotos") for one Workspace
// namespace. The buffer replaces any previous table in one nft transaction, so there
// is never a moment without rules.
//
// What the table does (prerouting: packets arriving on the namespace's interfaces,
// and locally generated ones looped back through lo; output: locally generated):
// - covered TCP (policy order) gets the fwmark and TPROXY to the TCP listener; the
//   fwmark rule routes it to the local table (`local default dev lo`).
// - with resolvers, DNS (UDP and TCP port 53, any address) goes to the DNS listeners.
// - FAIL CLOSED: nft's tproxy expression does not match when no transparent socket
//   listens (NFT_BREAK: evaluation goes on), so an explicit drop follows each tproxy
//   rule; while the agent is dead or still opening listeners (port 0 here) covered
//   packets are dropped, never forwarded. A postrouting guard drops marked packets
//   that would leave on a real interface (e.g. the fwmark rule is missing).
// - other IP traffic to a covered destination is rejected (admin-prohibited); for
//   entries with port ranges, other port-carrying protocols (UDP, SCTP, ...) to those
//   ports; for entries without, every non-TCP protocol.
// - the listeners (bound to the wildcard address) cannot be reached directly at the
//   namespace's own address: only through TPROXY.
// - traffic to the namespace's own, broadcast and multicast addresses never leaves
//   and is not covered (keeps ARP/NDP/DHCP working); DNS interception still applies.
// - ISOLATED: nothing leaves: forwarded traffic is rejected; locally generated
//   traffic may only go to lo or answer a connection made to the namespace.
// - connections already intercepted stay with the agent across policy updates
//   (prerouting: `socket transparent 1`; output: the conntrack mark), so the data
//   plane can drain them; with the agent dead there is no socket and they drop.
// The meta mark and (in output) the conntrack mark are the agent's in this namespace.
// Only original-direction packets are considered (`ct direction reply` returns), so
// replies to uncovered connections and the listeners' own answers pass.
#include <string>

#include "netns/ruleset_spec.h"

namespace kib::netns {

inline constexpr const char* kTableName = "kibotos";

// Replaces the table (creating it if absent) atomically.
std::string build_ruleset(const RulesetParams& params);
// Removes the table if present (idempotent).
std::string build_table_removal();

// Normalises a route for rule generation: sorted prefixes without those contained
// in another, sorted merged port ranges. Exposed for tests.
CoveredRoute normalise_route(const CoveredRoute& route);

}  // namespace kib::netns
