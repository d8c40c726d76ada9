#include "netns/policy_routing.h"

#include <linux/fib_rules.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <netlink/route/route.h>
#include <netlink/route/rule.h>

#include <memory>
#include <string>

#include "netns/namespace_handle.h"
#include "netns/netlink_socket.h"

namespace kib::netns {
namespace {

constexpr int kLoopbackIfindex = 1;  // LOOPBACK_IFINDEX: lo is always 1
constexpr int kMaxDuplicateRules = 16;

using RuleObj = std::unique_ptr<rtnl_rule, NlDeleter<rtnl_rule_put>>;
using RouteObj = std::unique_ptr<rtnl_route, NlDeleter<rtnl_route_put>>;
using LinkObj = std::unique_ptr<rtnl_link, NlDeleter<rtnl_link_put>>;
using AddrObj = std::unique_ptr<nl_addr, NlDeleter<nl_addr_put>>;

// The socket is opened on the namespace thread, so it talks to that namespace.
Result<NlSocket> connect_route_socket() { return connect_netlink(NETLINK_ROUTE); }

Status bring_lo_up(nl_sock* sk) {
  rtnl_link* raw = nullptr;
  if (int err = rtnl_link_get_kernel(sk, kLoopbackIfindex, nullptr, &raw); err < 0) return nl_error("get lo", err);
  LinkObj lo(raw);
  if (rtnl_link_get_flags(lo.get()) & IFF_UP) return {};
  LinkObj change(rtnl_link_alloc());
  if (!change) return make_error(Code::resource_exhausted, "rtnl_link_alloc failed");
  rtnl_link_set_flags(change.get(), IFF_UP);
  if (int err = rtnl_link_change(sk, lo.get(), change.get(), 0); err < 0) return nl_error("set lo up", err);
  return {};
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
  rtnl_route_add_nexthop(route.get(), nh);      // the route owns nh now
  return route;
}

const char* family_name(int family) { return family == AF_INET ? "ipv4" : "ipv6"; }

Status install_family(nl_sock* sk, int family, const RoutingParams& p) {
  RuleObj rule = make_rule(family, p);
  RouteObj route = make_local_default(family, p);
  if (!rule || !route) return make_error(Code::resource_exhausted, "libnl allocation failed");
  // NLM_F_EXCL: an identical rule left by an earlier run is kept, not duplicated.
  if (int err = rtnl_rule_add(sk, rule.get(), NLM_F_EXCL); err < 0 && err != -NLE_EXIST)
    return nl_error(std::string("add fwmark rule ") + family_name(family), err);
  if (int err = rtnl_route_add(sk, route.get(), NLM_F_REPLACE); err < 0)
    return nl_error(std::string("add local route ") + family_name(family), err);
  return {};
}

Status remove_family(nl_sock* sk, int family, const RoutingParams& p) {
  RuleObj rule = make_rule(family, p);
  RouteObj route = make_local_default(family, p);
  if (!rule || !route) return make_error(Code::resource_exhausted, "libnl allocation failed");
  for (int i = 0; i < kMaxDuplicateRules; ++i) {
    int err = rtnl_rule_delete(sk, rule.get(), 0);
    if (err == -NLE_OBJ_NOTFOUND || err == -NLE_NOADDR) break;
    if (err < 0) return nl_error(std::string("delete fwmark rule ") + family_name(family), err);
  }
  int err = rtnl_route_delete(sk, route.get(), 0);
  if (err < 0 && err != -NLE_OBJ_NOTFOUND && err != -NLE_NOADDR)
    return nl_error(std::string("delete local route ") + family_name(family), err);
  return {};
}

using CacheObj = std::unique_ptr<nl_cache, NlDeleter<nl_cache_free>>;

bool has_rule(nl_cache* rules, int family, const RoutingParams& p) {
  for (nl_object* o = nl_cache_get_first(rules); o; o = nl_cache_get_next(o)) {
    auto* r = reinterpret_cast<rtnl_rule*>(o);
    if (rtnl_rule_get_family(r) == family && rtnl_rule_get_prio(r) == p.priority &&
        rtnl_rule_get_mark(r) == p.mark && rtnl_rule_get_table(r) == p.table &&
        rtnl_rule_get_action(r) == FR_ACT_TO_TBL)
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

}  // namespace

Status check_policy_routing(int ns_fd, const RoutingParams& params) {
  return run_in_netns_void(ns_fd, [&]() -> Status {
    auto sk = connect_route_socket();
    if (!sk.ok()) return std::move(sk).error();
    nl_cache* raw = nullptr;
    if (int err = rtnl_rule_alloc_cache(sk->get(), AF_UNSPEC, &raw); err < 0) return nl_error("list rules", err);
    CacheObj rules(raw);
    raw = nullptr;
    // ROUTE_CACHE_CONTENT: every table, not only main.
    if (int err = rtnl_route_alloc_cache(sk->get(), AF_UNSPEC, ROUTE_CACHE_CONTENT, &raw); err < 0)
      return nl_error("list routes", err);
    CacheObj routes(raw);
    for (int family : {AF_INET, AF_INET6}) {
      if (!has_rule(rules.get(), family, params))
        return make_error(Code::failed_precondition, std::string("fwmark rule missing (") + family_name(family) + ")");
      if (!has_local_default(routes.get(), family, params))
        return make_error(Code::failed_precondition, std::string("local route missing (") + family_name(family) + ")");
    }
    return {};
  });
}

Status install_policy_routing(int ns_fd, const RoutingParams& params) {
  return run_in_netns_void(ns_fd, [&]() -> Status {
    auto sk = connect_route_socket();
    if (!sk.ok()) return std::move(sk).error();
    KIB_TRY(bring_lo_up(sk->get()));
    KIB_TRY(install_family(sk->get(), AF_INET, params));
    KIB_TRY(install_family(sk->get(), AF_INET6, params));
    return {};
  });
}

Status remove_policy_routing(int ns_fd, const RoutingParams& params) {
  return run_in_netns_void(ns_fd, [&]() -> Status {
    auto sk = connect_route_socket();
    if (!sk.ok()) return std::move(sk).error();
    KIB_TRY(remove_family(sk->get(), AF_INET, params));
    KIB_TRY(remove_family(sk->get(), AF_INET6, params));
    return {};
  });
}

}  // namespace kib::netns
