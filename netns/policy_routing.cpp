#include "netns/policy_routing.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fib_rules.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/route/route.h>
#include <netlink/route/rule.h>

#include <unistd.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/common/errno_error.h"
#include "agent/common/unique_fd.h"
#include "netns/namespace_handle.h"
#include "netns/netlink_socket.h"

namespace kib::netns {
namespace {

constexpr int kLoopbackIfindex = 1;  // LOOPBACK_IFINDEX: lo is always 1
constexpr int kMaxDuplicateRules = 16;

using RuleObj = CPtr<rtnl_rule_put>;
using RouteObj = CPtr<rtnl_route_put>;
using LinkObj = CPtr<rtnl_link_put>;
using AddrObj = CPtr<nl_addr_put>;

// A route socket that keeps the kernel's own errno and message for error texts.
struct RouteSocket {
  NlSocket sk;
  std::unique_ptr<NlKernelError> kernel;  // the error callback's target: a stable address

  // The socket for the next request, with no earlier answer left to misreport.
  nl_sock* fresh() {
    *kernel = NlKernelError{};
    return sk.get();
  }
  Error error(const std::string& what, int err) const { return nl_error(what, err, kernel.get()); }
};

// Opened on the namespace thread, so it talks to that namespace.
Result<RouteSocket> connect_route_socket() {
  auto sk = connect_netlink(NETLINK_ROUTE);
  if (!sk.ok()) return std::move(sk).error();
  RouteSocket rs{std::move(*sk), std::make_unique<NlKernelError>()};
  capture_kernel_errors(rs.sk.get(), rs.kernel.get());
  return rs;
}

Status bring_lo_up(RouteSocket& rs) {
  rtnl_link* raw = nullptr;
  if (int err = rtnl_link_get_kernel(rs.fresh(), kLoopbackIfindex, nullptr, &raw); err < 0)
    return rs.error("get lo", err);
  LinkObj lo(raw);
  if (rtnl_link_get_flags(lo.get()) & IFF_UP) return {};
  LinkObj change(rtnl_link_alloc());
  if (!change) return make_error(Code::resource_exhausted, "rtnl_link_alloc failed");
  rtnl_link_set_flags(change.get(), IFF_UP);
  if (int err = rtnl_link_change(rs.fresh(), lo.get(), change.get(), 0); err < 0) return rs.error("set lo up", err);
  return {};
}

bool has_family(Families f, int family) { return family == AF_INET ? f.ipv4 : f.ipv6; }
void add_family(Families& f, int family) { (family == AF_INET ? f.ipv4 : f.ipv6) = true; }

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

// What the namespace of the calling thread carries (policy_routing.h says when a
// family is live). /proc/sys/net answers for the calling thread's namespace.
struct FamilyProbe {
  Families live;
  Families blocked;          // live, but IPv6 is off on lo
  std::string ipv6_blocked;  // why, for the error text
};
// Whether IPv6 is enabled on `ifname` (its disable_ipv6 is 0); nullopt when the
// interface went away meanwhile.
Result<std::optional<bool>> ipv6_enabled_on(int conf_dir, const std::string& ifname) {
  const std::string rel = ifname + "/disable_ipv6";
  UniqueFd fd(::openat(conf_dir, rel.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::optional<bool>();
    return errno_error("read /proc/sys/net/ipv6/conf/" + rel);
  }
  char buf[16] = {};
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n < 0) return errno_error("read /proc/sys/net/ipv6/conf/" + rel);
  return std::optional<bool>(n > 0 && buf[0] == '0');
}

Result<FamilyProbe> probe_families() {
  FamilyProbe probe;
  probe.live.ipv4 = true;  // Linux cannot turn IPv4 off in a namespace
  std::unique_ptr<DIR, DirCloser> dir(::opendir("/proc/sys/net/ipv6/conf"));
  if (!dir) {
    if (errno == ENOENT) return probe;  // a kernel without IPv6 (ipv6.disable=1)
    return errno_error("list /proc/sys/net/ipv6/conf (IPv6 state of the namespace)");
  }
  std::vector<std::string> enabled;
  bool lo_enabled = false;
  while (dirent* ent = ::readdir(dir.get())) {
    std::string name = ent->d_name;
    // `all` and `default` are written through to the interfaces, not consulted.
    if (name == "." || name == ".." || name == "all" || name == "default") continue;
    auto on = ipv6_enabled_on(::dirfd(dir.get()), name);
    if (!on.ok()) return std::move(on).error();
    if (!on->value_or(false)) continue;
    enabled.push_back(name);
    if (name == "lo") lo_enabled = true;
  }
  probe.live.ipv6 = !enabled.empty();
  if (probe.live.ipv6 && !lo_enabled) {
    probe.blocked.ipv6 = true;
    std::string list;
    for (const auto& n : enabled) list += (list.empty() ? "" : ", ") + n;
    probe.ipv6_blocked = "cannot enforce ipv6: IPv6 is enabled on " + list +
                         " but disabled on lo (net.ipv6.conf.lo.disable_ipv6=1), where the agent's local route "
                         "must be; covered IPv6 traffic is dropped until IPv6 is enabled on lo or disabled on "
                         "every interface";
  }
  return probe;
}

RuleObj make_rule(int family, const RoutingParams& p) {
  RuleObj r(rtnl_rule_alloc());
  if (!r) return r;
  rtnl_rule_set_family(r.get(), family);
  rtnl_rule_set_prio(r.get(), p.priority);
  rtnl_rule_set_mark(r.get(), p.mark);
  rtnl_rule_set_table(r.get(), p.table);
  rtnl_rule_set_action(r.get(), FR_ACT_TO_TBL);
  return r;
}

RouteObj make_local_default(int family, const RoutingParams& p) {
  RouteObj route(rtnl_route_alloc());
  if (!route) return route;
  unsigned char zero[16] = {};
  AddrObj dst(nl_addr_build(family, zero, family == AF_INET ? 4 : 16));
  rtnl_nexthop* nh = rtnl_route_nh_alloc();
  if (!dst || !nh) {
    if (nh) rtnl_route_nh_free(nh);
    return RouteObj();
  }
  nl_addr_set_prefixlen(dst.get(), 0);
  rtnl_route_set_family(route.get(), family);
  rtnl_route_set_table(route.get(), p.table);
  rtnl_route_set_type(route.get(), RTN_LOCAL);
  rtnl_route_set_scope(route.get(), RT_SCOPE_HOST);
  rtnl_route_set_dst(route.get(), dst.get());  // takes its own reference
  rtnl_route_nh_set_ifindex(nh, kLoopbackIfindex);
  rtnl_route_add_nexthop(route.get(), nh);  // the route owns nh now
  return route;
}

const char* family_name(int family) { return family == AF_INET ? "ipv4" : "ipv6"; }

Status install_family(RouteSocket& rs, int family, const RoutingParams& p) {
  RuleObj rule = make_rule(family, p);
  RouteObj route = make_local_default(family, p);
  if (!rule || !route) return make_error(Code::resource_exhausted, "libnl allocation failed");
  // NLM_F_EXCL: an identical rule left by an earlier run is kept, not duplicated.
  if (int err = rtnl_rule_add(rs.fresh(), rule.get(), NLM_F_EXCL); err < 0 && err != -NLE_EXIST)
    return rs.error(std::string("add fwmark rule ") + family_name(family), err);
  if (int err = rtnl_route_add(rs.fresh(), route.get(), NLM_F_REPLACE); err < 0)
    return rs.error(
        std::string("add local route ") + family_name(family) + " (dev lo, table " + std::to_string(p.table) + ")",
        err);
  return {};
}

// Nothing to remove: not there, or the kernel has no such family at all.
bool absent(int err) { return err == -NLE_OBJ_NOTFOUND || err == -NLE_NOADDR || err == -NLE_AF_NOSUPPORT; }

Status remove_family(RouteSocket& rs, int family, const RoutingParams& p) {
  RuleObj rule = make_rule(family, p);
  RouteObj route = make_local_default(family, p);
  if (!rule || !route) return make_error(Code::resource_exhausted, "libnl allocation failed");
  for (int i = 0; i < kMaxDuplicateRules; ++i) {
    int err = rtnl_rule_delete(rs.fresh(), rule.get(), 0);
    if (absent(err)) break;
    if (err < 0) return rs.error(std::string("delete fwmark rule ") + family_name(family), err);
  }
  int err = rtnl_route_delete(rs.fresh(), route.get(), 0);
  if (err < 0 && !absent(err)) return rs.error(std::string("delete local route ") + family_name(family), err);
  return {};
}

using CacheObj = CPtr<nl_cache_free>;

bool has_rule(nl_cache* rules, int family, const RoutingParams& p) {
  for (nl_object* o = nl_cache_get_first(rules); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_rule*>(o);
    if (rtnl_rule_get_family(r) == family && rtnl_rule_get_prio(r) == p.priority && rtnl_rule_get_mark(r) == p.mark &&
        rtnl_rule_get_table(r) == p.table && rtnl_rule_get_action(r) == FR_ACT_TO_TBL)
      return true;
  }
  return false;
}

bool has_local_default(nl_cache* routes, int family, const RoutingParams& p) {
  for (nl_object* o = nl_cache_get_first(routes); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_route*>(o);
    nl_addr* dst = rtnl_route_get_dst(r);
    if (rtnl_route_get_family(r) == family && rtnl_route_get_table(r) == p.table &&
        rtnl_route_get_type(r) == RTN_LOCAL && dst && nl_addr_get_prefixlen(dst) == 0)
      return true;
  }
  return false;
}

// The fwmark rules and local routes of the namespace, as two libnl caches.
struct RoutingDump {
  CacheObj rules;
  CacheObj routes;
  bool has(int family, const RoutingParams& p) const {
    return has_rule(rules.get(), family, p) && has_local_default(routes.get(), family, p);
  }
};

Result<RoutingDump> dump_routing(RouteSocket& sk) {
  nl_cache* raw = nullptr;
  if (int err = rtnl_rule_alloc_cache(sk.fresh(), AF_UNSPEC, &raw); err < 0) return sk.error("list rules", err);
  CacheObj rules(raw);
  raw = nullptr;
  // ROUTE_CACHE_CONTENT: every table, not only main.
  if (int err = rtnl_route_alloc_cache(sk.fresh(), AF_UNSPEC, ROUTE_CACHE_CONTENT, &raw); err < 0)
    return sk.error("list routes", err);
  return RoutingDump{std::move(rules), CacheObj(raw)};
}

// Why the family's state now differs from what the last install left, or empty.
std::string family_change(int family, const FamilyProbe& now, const RoutingState& installed) {
  const std::string name = family_name(family);
  const bool live = has_family(now.live, family), blocked = has_family(now.blocked, family);
  if (has_family(installed.enforced, family)) {
    if (!live) return name + " is no longer live in the namespace (disabled on every interface)";
    if (blocked) return name + " was turned off on lo while live on other interfaces";
    return {};
  }
  if (has_family(installed.blocked, family))
    return blocked ? std::string() : name + " settings of the namespace changed since it could not be enforced";
  if (live) return name + " is live in the namespace but not enforced";
  return {};
}

}  // namespace

std::vector<std::string> family_names(Families families) {
  std::vector<std::string> out;
  if (families.ipv4) out.emplace_back("ipv4");
  if (families.ipv6) out.emplace_back("ipv6");
  return out;
}

Status check_policy_routing(int ns_fd, const RoutingParams& params, const RoutingState& installed) {
  return run_in_netns_void(ns_fd, [&]() -> Status {
    auto probe = probe_families();
    if (!probe.ok()) return std::move(probe).error();
    for (int family : {AF_INET, AF_INET6})
      if (std::string change = family_change(family, *probe, installed); !change.empty())
        return make_error(Code::failed_precondition, change);
    const Families& enforced = installed.enforced;
    if (!enforced.ipv4 && !enforced.ipv6) return {};
    auto sk = connect_route_socket();
    if (!sk.ok()) return std::move(sk).error();
    auto dump = dump_routing(*sk);
    if (!dump.ok()) return std::move(dump).error();
    nl_cache* rules = dump->rules.get();
    nl_cache* routes = dump->routes.get();
    for (int family : {AF_INET, AF_INET6}) {
      if (!has_family(enforced, family)) continue;
      if (!has_rule(rules, family, params))
        return make_error(Code::failed_precondition, std::string("fwmark rule missing (") + family_name(family) + ")");
      if (!has_local_default(routes, family, params))
        return make_error(Code::failed_precondition, std::string("local route missing (") + family_name(family) + ")");
    }
    return {};
  });
}

namespace {

// install_policy_routing and ensure_policy_routing, on the namespace's thread.
RoutingInstall install_here(const RoutingParams& params, bool keep_present) {
  RoutingInstall out;
  out.status = [&]() -> Status {
    auto sk = connect_route_socket();
    if (!sk.ok()) return std::move(sk).error();
    KIB_TRY(bring_lo_up(*sk));
    auto probe = probe_families();
    if (!probe.ok()) return std::move(probe).error();
    std::optional<RoutingDump> present;
    if (keep_present) {
      auto dump = dump_routing(*sk);
      if (!dump.ok()) return std::move(dump).error();
      present.emplace(std::move(*dump));
    }
    // Each live family on its own: one that cannot be enforced leaves the others in
    // force (its covered traffic stays dropped by the table).
    Status first_failure;
    for (int family : {AF_INET, AF_INET6}) {
      if (!has_family(probe->live, family)) continue;
      Status st = has_family(probe->blocked, family)
                      ? Status(make_error(Code::failed_precondition, probe->ipv6_blocked))
                  : present && present->has(family, params) ? Status{}
                                                            : install_family(*sk, family, params);
      if (st.ok()) {
        add_family(out.state.enforced, family);
        continue;
      }
      if (has_family(probe->blocked, family)) add_family(out.state.blocked, family);
      if (first_failure.ok()) first_failure = std::move(st);
    }
    return first_failure;
  }();
  return out;
}

}  // namespace

RoutingInstall install_policy_routing(int ns_fd, const RoutingParams& params) {
  RoutingInstall out;
  Status ran = run_in_netns_void(ns_fd, [&]() -> Status {
    out = install_here(params, false);
    return {};
  });
  if (!ran.ok()) out.status = std::move(ran);
  return out;
}

RoutingInstall ensure_policy_routing_here(const RoutingParams& params) { return install_here(params, true); }

Status remove_policy_routing(int ns_fd, const RoutingParams& params) {
  return run_in_netns_void(ns_fd, [&]() -> Status {
    auto sk = connect_route_socket();
    if (!sk.ok()) return std::move(sk).error();
    KIB_TRY(remove_family(*sk, AF_INET, params));
    KIB_TRY(remove_family(*sk, AF_INET6, params));
    return {};
  });
}

}  // namespace kib::netns
