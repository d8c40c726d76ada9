#include "netns/attachment.h"

#include "netns/nft_apply.h"
#include "netns/nft_ruleset.h"
#include "netns/time_wait_sweep.h"

namespace kib::netns {
namespace {

const std::string kListTable = std::string("list table inet ") + kTableName;

RoutingParams routing_of(const AttachParams& p) { return RoutingParams{p.mark, p.route_table, p.rule_priority}; }

Status end_relayed_time_wait(int ns_fd, const KeepTimeWait& keep = {}) {
  auto ended = run_in_netns<size_t>(ns_fd, [&] { return end_transparent_time_wait(keep); });
  if (!ended.ok()) return make_error(ended.error().code, "ending relayed TIME_WAIT sockets: " + ended.error().message);
  return {};
}

// DNS has one listener per family and protocol (the DNS service is one loop), opened
// only while the policy has resolvers: a Workspace without them holds none.
Status open_dns_listeners(int ns_fd, const AttachParams& p, Listeners& l) {
  auto dns_udp = open_transparent_listeners(ns_fd, Transport::udp, 1);
  if (!dns_udp.ok()) return std::move(dns_udp).error();
  auto dns_tcp = open_transparent_listeners(ns_fd, Transport::tcp, 1, p.guest_congestion_control);
  if (!dns_tcp.ok()) return std::move(dns_tcp).error();
  l.dns_udp = std::move(*dns_udp);
  l.dns_tcp = std::move(*dns_tcp);
  return {};
}

Result<Listeners> open_listeners(int ns_fd, const AttachParams& p) {
  Listeners l;
  auto tcp = open_transparent_listeners(ns_fd, Transport::tcp, p.listeners_per_family, p.guest_congestion_control);
  if (!tcp.ok()) return std::move(tcp).error();
  l.tcp = std::move(*tcp);
  if (p.policy.intercept_dns) KIB_TRY(open_dns_listeners(ns_fd, p, l));
  return l;
}

}  // namespace

RoutingParams Attachment::routing() const { return routing_of(params_); }

Status Attachment::install_routing() {
  RoutingInstall installed = install_policy_routing(ns_.fd(), routing());
  routing_state_ = installed.state;
  family_error_ = installed.status.ok() ? std::string() : installed.status.error().message;
  return installed.status;
}

Families Attachment::enforced_families() const {
  const Families& routed = routing_state_.enforced;
  return Families{routed.ipv4 && listening_.ipv4, routed.ipv6 && listening_.ipv6};
}

Status Attachment::apply_table() {
  auto listing = apply_nft_and_list(ns_.fd(), build_ruleset(RulesetParams{params_.policy, ports_, params_.mark}),
                                    kListTable);
  if (!listing.ok()) return std::move(listing).error();
  table_listing_ = std::move(*listing);
  return {};
}

Result<Attachment> Attachment::prepare(const std::string& path, const AttachParams& params) {
  auto ns = NamespaceHandle::open(path);
  if (!ns.ok()) return std::move(ns).error();
  return prepare(std::move(*ns), params);
}

Result<Attachment> Attachment::prepare(NamespaceHandle ns, const AttachParams& params) {
  Attachment a(std::move(ns), params);
  // Ports are 0 here: the table drops covered traffic until the listeners exist. Not
  // listed afterwards: open() writes the table again right after, and check()
  // compares with that write's listing.
  KIB_TRY(apply_nft(a.ns_.fd(), build_ruleset(RulesetParams{a.params_.policy, a.ports_, a.params_.mark})));
  // A live family that cannot be enforced does not hold up the others: its covered
  // traffic stays dropped by the table, and family_error() says why.
  Status routed = a.install_routing();
  if (!routed.ok() && a.routing_state_.enforced == Families{}) return std::move(routed).error();
  return a;
}

Status Attachment::open() {
  auto listeners = open_listeners(ns_.fd(), params_);
  if (!listeners.ok()) return std::move(listeners).error();
  listeners_ = std::move(*listeners);
  ports_ = TproxyPorts{listeners_.tcp.port, listeners_.dns_udp.port, listeners_.dns_tcp.port};
  listening_ = Families{!listeners_.tcp.v4.empty(), !listeners_.tcp.v6.empty()};
  return apply_table();
}

Result<Attachment> Attachment::attach(const std::string& path, const AttachParams& params) {
  auto ns = NamespaceHandle::open(path);
  if (!ns.ok()) return std::move(ns).error();
  return attach(std::move(*ns), params);
}

Result<Attachment> Attachment::attach(NamespaceHandle ns, const AttachParams& params) {
  auto a = prepare(std::move(ns), params);
  if (!a.ok()) return a;
  KIB_TRY(a->open());
  return a;
}

Status Attachment::remove_stale(const std::string& path, const AttachParams& params) {
  auto ns = NamespaceHandle::open(path);
  if (!ns.ok()) return std::move(ns).error();
  // Table first: without it nothing carries the mark, so the rules are inert.
  KIB_TRY(apply_nft(ns->fd(), build_table_removal()));
  KIB_TRY(remove_policy_routing(ns->fd(), routing_of(params)));
  return end_relayed_time_wait(ns->fd());
}

Status Attachment::update(const RulesetPolicy& policy) {
  RulesetPolicy previous = std::move(params_.policy);
  const TproxyPorts previous_ports = ports_;
  params_.policy = policy;
  // DNS listeners are opened before the table points at them, and closed only after
  // it no longer does (fail closed: TPROXY to a port with no listener drops).
  Listeners opened;
  const bool listening = ports_.tcp != 0;  // open() ran
  if (policy.intercept_dns && listening && ports_.dns_udp == 0) {
    if (Status st = open_dns_listeners(ns_.fd(), params_, opened); !st.ok()) {
      params_.policy = std::move(previous);
      return st;
    }
    ports_.dns_udp = opened.dns_udp.port;
    ports_.dns_tcp = opened.dns_tcp.port;
  } else if (!policy.intercept_dns) {
    ports_.dns_udp = ports_.dns_tcp = 0;
  }
  Status st = apply_table();
  if (!st.ok()) {
    // A failed transaction changed nothing in the kernel: keep describing what is
    // there (the listeners opened for it close here).
    params_.policy = std::move(previous);
    ports_ = previous_ports;
    return st;
  }
  if (opened.dns_udp.port != 0) {
    listeners_.dns_udp = std::move(opened.dns_udp);
    listeners_.dns_tcp = std::move(opened.dns_tcp);
  } else if (!policy.intercept_dns) {
    listeners_.dns_udp = ListenerSet{};  // those still held here; the caller closes those it took
    listeners_.dns_tcp = ListenerSet{};
  }
  coverage_shrank_ = !policy.covers_all_of(previous);
  return st;
}

Status Attachment::end_uncovered_time_wait() const {
  // The sweep dumps the kernel's TCP table, shared by every namespace (~3 ms here, half
  // an update's CPU): skipped when the update took no destination away.
  if (!coverage_shrank_) return {};
  const RulesetPolicy& policy = params_.policy;
  return end_relayed_time_wait(ns_.fd(), [&](const Prefix& local, uint16_t port) {
    return policy.intercepts_tcp(local, port);
  });
}

Status Attachment::detach() {
  KIB_TRY(apply_nft(ns_.fd(), build_table_removal()));
  KIB_TRY(remove_policy_routing(ns_.fd(), routing()));
  listeners_ = Listeners{};
  // After the table: no new relayed connection can leave another one behind.
  return end_relayed_time_wait(ns_.fd());
}

Status Attachment::check() const {
  if (!ns_.alive()) return make_error(Code::failed_precondition, "network namespace " + ns_.path() + " is gone");
  auto listed = run_nft(ns_.fd(), kListTable);
  // Out of fds or processes: nothing is known about the table (no helper to ask).
  if (!listed.ok() && listed.error().code == Code::resource_exhausted) return std::move(listed).error();
  if (!listed.ok()) return make_error(Code::failed_precondition, "nftables table missing: " + listed.error().message);
  if (!table_listing_) return make_error(Code::failed_precondition, "nftables table not verified (written concurrently)");
  if (*listed != table_listing_->text) return make_error(Code::failed_precondition, "nftables table changed");
  return check_routing();
}

Status Attachment::check_routing() const { return check_policy_routing(ns_.fd(), routing(), routing_state_); }

Status Attachment::reinstall() {
  KIB_TRY(apply_table());
  return install_routing();
}

Listeners Attachment::take_listeners() {
  Listeners out = std::move(listeners_);
  listeners_ = Listeners{};
  return out;
}

}  // namespace kib::netns
