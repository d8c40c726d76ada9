#pragma once
// A Workspace namespace attached to the agent: its nftables table, policy routing and
// transparent listeners. The runtime owns one per Workspace.
//
// Order matters for "fail closed ... while still setting a namespace up": the table
// is installed first without TPROXY targets (covered traffic dropped), then the
// routing and listeners, then the full table, each table write one transaction.
// Destroying an Attachment does not remove anything from the kernel: while the agent
// is stopped the table stays and drops covered traffic. Only detach() removes it.
// Not thread-safe: the caller serialises calls on one Attachment (different
// Attachments may be used from different threads).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "agent/common/result.h"
#include "netns/attach_memo.h"
#include "netns/namespace_handle.h"
#include "netns/nft_local.h"
#include "netns/policy_routing.h"
#include "netns/ruleset_spec.h"
#include "netns/transparent_listener.h"

namespace kib::netns {

inline constexpr uint32_t kDefaultMark = 0x6b696201;  // "kib" 1
inline constexpr uint32_t kDefaultRouteTable = 27497;
inline constexpr uint32_t kDefaultRulePriority = 100;

struct AttachParams {
  RulesetPolicy policy;
  // TCP listeners per family, SO_REUSEPORT siblings: one per data-plane loop that
  // accepts this Workspace's connections. DNS has one per family and protocol, and
  // only while the policy has resolvers.
  unsigned listeners_per_family = 1;
  // TCP congestion control of the agent's guest-facing sockets; empty: the namespace's.
  std::string guest_congestion_control;
  uint32_t mark = kDefaultMark;
  uint32_t route_table = kDefaultRouteTable;
  uint32_t rule_priority = kDefaultRulePriority;
};

struct Listeners {
  ListenerSet tcp;      // covered TCP; getsockname() on an accepted fd = original dst
  ListenerSet dns_udp;  // intercepted DNS/UDP; original dst in IP(V6)_RECVORIGDSTADDR (port 0: none)
  ListenerSet dns_tcp;  // intercepted DNS/TCP (port 0: none)
};

class Attachment {
 public:
  // Opens the namespace and installs everything. A stale table or rules left by a
  // crashed agent are replaced (re-attach reconciles). On failure after the first
  // table write the drop-only table stays: covered traffic stays blocked.
  static Result<Attachment> attach(const std::string& path, const AttachParams& params);
  // The same for a namespace the caller opened (and checked) already.
  static Result<Attachment> attach(NamespaceHandle ns, const AttachParams& params);

  // attach() in two steps, for callers (and tests) that act in between: prepare()
  // opens the namespace and installs the drop-only table and the routing; open()
  // opens the listeners and installs the full table.
  static Result<Attachment> prepare(const std::string& path, const AttachParams& params);
  static Result<Attachment> prepare(NamespaceHandle ns, const AttachParams& params);
  Status open();

  // attach() for a namespace the agent attached before it was started again, when the
  // kernel shows nothing changed since `note` was taken (attach_memo.h): the table is
  // kept as it is, the listeners are opened on the ports it points at, the policy
  // routing is installed (idempotent). failed_precondition saying what differs when
  // the note does not hold (another namespace, a transaction since, another table
  // text), aborted when a port is taken: the caller then attaches in full. Nothing in
  // the kernel is written before the note is found to hold.
  // first (optional) runs in the namespace before anything there is read, e.g. to
  // subscribe to its changes so that none after the reads goes unseen. All in one
  // visit of the namespace (one thread).
  static Result<Attachment> adopt(NamespaceHandle ns, const AttachParams& params, const AttachNote& note,
                                  const std::function<void()>& first = {});

  // Removes the table, rules and routes the agent may have left in a namespace it
  // no longer attaches (e.g. a Workspace deleted while the agent was down).
  static Status remove_stale(const std::string& path, const AttachParams& params);

  // Swaps the table for the new policy in one transaction. A policy that gains
  // resolvers gets DNS listeners first (take_listeners() hands them over after);
  // one that loses them stops pointing at them, then closes those still held here
  // (those taken are the caller's to close, now that nothing reaches them).
  Status update(const RulesetPolicy& policy);
  // After an update: ends the TIME_WAIT sockets of relayed connections whose
  // destination the policy no longer covers (time_wait_sweep.h), so the guest can
  // reach it directly from the same port at once. Nothing to do (and no kernel dump)
  // when the update covers all the policy before it did.
  Status end_uncovered_time_wait() const;

  // Removes the table, the rules and routes; closes the listeners still held here;
  // ends the TIME_WAIT sockets relayed connections left (time_wait_sweep.h).
  // Idempotent.
  Status detach();

  // Whether the kernel still enforces what was installed: failed_precondition naming
  // what is missing or changed (the namespace is gone; the table was removed, or its
  // content differs from what the agent's last table write left; a rule or a route
  // was removed behind the agent's back). update() with the same policy reinstalls
  // the table. The table is listed only when nftables there moved past the agent's
  // last write (its generation); when that write was not listed (attach and update
  // do not: listing costs as much as writing, and most namespaces never see another
  // transaction) the table is reported unverified, and reinstall() writes and lists
  // it, so that later transactions of others are told apart from changes to it.
  Status check() const;
  // check() without the table: the policy routing only, and the address families:
  // failed_precondition too when a family became live in the namespace since the
  // last install (IPv6 turned on), stopped being live, or failed to install before,
  // so that reinstall() brings what is enforced in line (policy_routing.h).
  Status check_routing() const;
  // Puts back what check() found missing: the table (as the current policy says, in
  // one transaction) and the policy routing of every live family; both idempotent.
  // An error when a live family cannot be enforced (the others are).
  Status reinstall();

  // The address families the agent enforces in the namespace: the table, the
  // routing and the listeners are in place for them. A family not live there is not
  // enforced (there is no traffic of it); a live one that is not enforced has its
  // covered traffic dropped by the table, and family_error() says why.
  Families enforced_families() const;
  // Why a live family is not enforced, or empty.
  const std::string& family_error() const { return family_error_; }

  // Moves the listener fds held here to the caller (the data plane): after open(),
  // all of them; after update(), the DNS ones it opened. ports() stays valid.
  Listeners take_listeners();
  TproxyPorts ports() const { return ports_; }
  const RulesetPolicy& policy() const { return params_.policy; }
  // Whether the table the agent last wrote (or adopted) is the one `policy` needs.
  bool table_is_for(const RulesetPolicy& policy) const;
  const NamespaceHandle& ns() const { return ns_; }
  // The namespace's nftables generation right after the agent's last table write,
  // when nothing else wrote in between (what check() compares with is known); else
  // nullopt. A namespace still at it needs no listing to know the table is intact.
  std::optional<uint32_t> written_generation() const { return written_generation_; }
  // What adopt() needs to take this namespace over after a restart, while the agent's
  // last table write is known to be the namespace's last transaction (as above).
  std::optional<AttachNote> note() const;
  bool namespace_alive() const { return ns_.alive(); }

 private:
  Attachment(NamespaceHandle ns, AttachParams params) : ns_(std::move(ns)), params_(std::move(params)) {}
  // list: keep nft's listing of the written table for check() (reinstall does).
  Status apply_table(bool list = false);
  RoutingParams routing() const;
  // Installs the policy routing and records what it left; the error of a live
  // family that could not be enforced.
  Status install_routing();

  NamespaceHandle ns_;
  AttachParams params_;
  TproxyPorts ports_;
  Listeners listeners_;
  // `nft list table` right after the last table write, what check() compares with;
  // nullopt when that write was not listed or another transaction interleaved (the
  // content is then unknown, and check() reports it so that a repair writes and lists
  // the table again).
  std::optional<std::string> table_listing_;
  // The generation after the last table write (also for an adopted table, whose text
  // was not listed), or nullopt when unknown.
  std::optional<uint32_t> written_generation_;
  uint64_t ruleset_digest_ = 0;  // of the text the last table write sent
  uint64_t netns_cookie_ = 0;    // of the namespace, once listeners are open
  // Whether the last update() left a destination uncovered that the policy before it
  // covered (end_uncovered_time_wait() has work only then).
  bool coverage_shrank_ = false;
  RoutingState routing_state_;  // what the last install_routing left
  std::string family_error_;    // its error, when a live family is not enforced
  Families listening_;          // families the listeners were opened for
};

}  // namespace kib::netns
