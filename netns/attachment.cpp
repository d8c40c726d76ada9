#include "netns/attachment.h"

#include "netns/inherited_listeners.h"
#include "netns/nft_apply.h"
#include "netns/nft_generation.h"
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

// The namespace's cookie, from any listener open there.
Result<uint64_t> cookie_of(const Listeners& l) {
  for (const auto* fds : {&l.tcp.v4, &l.tcp.v6})
    if (!fds->empty()) return netns_cookie(fds->front().get());
  return make_error(Code::internal, "no listener open");
}

// Everything adopt() needs from inside the namespace, in one visit: the listeners on
// the ports the table points at, then (after them: a write from here on moves it) the
// nftables generation, then the policy routing as far as it is missing.
struct Adopted {
  Listeners listeners;
  uint32_t generation = 0;
  RoutingInstall routing;
};

Result<Adopted> open_adopted(int ns_fd, const AttachParams& p, const TproxyPorts& ports,
                             const std::function<void()>& first) {
  return run_in_netns<Adopted>(ns_fd, [&]() -> Result<Adopted> {
    if (first) first();
    Adopted a;
    auto tcp =
        open_transparent_listeners_here(Transport::tcp, p.listeners_per_family, p.guest_congestion_control, ports.tcp);
    if (!tcp.ok()) return std::move(tcp).error();
    a.listeners.tcp = std::move(*tcp);
    if (ports.dns_udp != 0) {
      auto udp = open_transparent_listeners_here(Transport::udp, 1, {}, ports.dns_udp);
      if (!udp.ok()) return std::move(udp).error();
      auto tcp_dns = open_transparent_listeners_here(Transport::tcp, 1, p.guest_congestion_control, ports.dns_tcp);
      if (!tcp_dns.ok()) return std::move(tcp_dns).error();
      a.listeners.dns_udp = std::move(*udp);
      a.listeners.dns_tcp = std::move(*tcp_dns);
    }
    auto gen = nft_generation_here();
    if (!gen.ok()) return std::move(gen).error();
    a.generation = *gen;
    a.routing = ensure_policy_routing_here(routing_of(p));
    return a;
  });
}

Result<Listeners> open_listeners(int ns_fd, const AttachParams& p) {
  Listeners l;
  auto tcp = run_in_netns<ListenerSet>(ns_fd, [&] {
    return open_transparent_listeners_here(Transport::tcp, p.listeners_per_family, p.guest_congestion_control,
                                           inherited_port_here());
  });
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

Status Attachment::apply_table(bool list) {
  const std::string text = build_ruleset(RulesetParams{params_.policy, ports_, params_.mark});
  auto written = write_nft(ns_.fd(), text, list ? kListTable : std::string());
  if (!written.ok()) return std::move(written).error();
  table_listing_ = *written ? std::move((*written)->listing) : std::nullopt;
  written_generation_ = *written ? std::optional<uint32_t>((*written)->generation) : std::nullopt;
  ruleset_digest_ = ruleset_digest(text);
  return {};
}

bool Attachment::table_is_for(const RulesetPolicy& policy) const {
  return ruleset_digest(build_ruleset(RulesetParams{policy, ports_, params_.mark})) == ruleset_digest_;
}

std::optional<AttachNote> Attachment::note() const {
  if (!written_generation_ || netns_cookie_ == 0 || ports_.tcp == 0) return std::nullopt;
  return AttachNote{netns_cookie_, *written_generation_, ports_, ruleset_digest_};
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
  // compares with that write's listing. A take-over that attaches afresh points it at
  // the handed-over listeners at once (open, in this process and the previous one),
  // so SYNs meanwhile are accepted instead of dropped.
  if (have_inherited_listeners()) {
    auto port = run_in_netns<uint16_t>(a.ns_.fd(), [] { return Result<uint16_t>(inherited_port_here()); });
    if (port.ok()) a.ports_.tcp = *port;
  }
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
  // Without it the namespace cannot be adopted after a restart; nothing else needs it.
  if (auto cookie = cookie_of(listeners_); cookie.ok()) netns_cookie_ = *cookie;
  return apply_table();
}

Result<Attachment> Attachment::adopt(NamespaceHandle ns, const AttachParams& params, const AttachNote& note,
                                     const std::function<void()>& first) {
  Attachment a(std::move(ns), params);
  // The policy or the agent changed since the write, or the ports are not ours.
  const std::string text = build_ruleset(RulesetParams{a.params_.policy, note.ports, a.params_.mark});
  if (note.ports.tcp == 0 || (note.ports.dns_udp != 0) != a.params_.policy.intercept_dns ||
      ruleset_digest(text) != note.ruleset_digest)
    return make_error(Code::failed_precondition, "the table there is not the one this policy needs");
  auto adopted = open_adopted(a.ns_.fd(), a.params_, note.ports, first);
  if (!adopted.ok()) return std::move(adopted).error();
  auto cookie = cookie_of(adopted->listeners);
  if (!cookie.ok()) return std::move(cookie).error();
  if (*cookie != note.netns_cookie)
    return make_error(Code::failed_precondition, "another network namespace than the one written");
  if (adopted->generation != note.generation)
    return make_error(Code::failed_precondition, "nftables there changed since the agent's last write (generation " +
                                                     std::to_string(adopted->generation) + ", written at " +
                                                     std::to_string(note.generation) + ")");
  const RoutingInstall& routed = adopted->routing;
  if (!routed.status.ok() && routed.state.enforced == Families{}) return routed.status.error();
  a.listeners_ = std::move(adopted->listeners);
  a.ports_ = note.ports;
  a.listening_ = Families{!a.listeners_.tcp.v4.empty(), !a.listeners_.tcp.v6.empty()};
  a.netns_cookie_ = note.netns_cookie;
  a.ruleset_digest_ = note.ruleset_digest;
  a.written_generation_ = note.generation;  // the text is not listed: check() rewrites it once it moves
  a.routing_state_ = routed.state;
  a.family_error_ = routed.status.ok() ? std::string() : routed.status.error().message;
  return a;
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
  return end_relayed_time_wait(ns_.fd(),
                               [&](const Prefix& local, uint16_t port) { return policy.intercepts_tcp(local, port); });
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
  // Nothing committed there since the agent's last write (or since the write an
  // adopted table came from): the table is that write, no listing needed.
  if (auto gen = nft_generation(ns_.fd()); gen.ok() && written_generation_ == *gen) return check_routing();
  auto listed = run_nft(ns_.fd(), kListTable);
  // Out of fds or processes: nothing is known about the table (no helper to ask).
  if (!listed.ok() && listed.error().code == Code::resource_exhausted) return std::move(listed).error();
  if (!listed.ok()) return make_error(Code::failed_precondition, "nftables table missing: " + listed.error().message);
  if (!table_listing_)
    return make_error(Code::failed_precondition,
                      "nftables changed in the namespace since the agent's last write, which was not listed");
  if (*listed != *table_listing_) return make_error(Code::failed_precondition, "nftables table changed");
  return check_routing();
}

Status Attachment::check_routing() const { return check_policy_routing(ns_.fd(), routing(), routing_state_); }

Status Attachment::reinstall() {
  KIB_TRY(apply_table(/*list=*/true));
  return install_routing();
}

Listeners Attachment::take_listeners() {
  Listeners out = std::move(listeners_);
  listeners_ = Listeners{};
  return out;
}

}  // namespace kib::netns
