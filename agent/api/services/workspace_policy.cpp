#include "agent/api/services/workspace_policy.h"

#include <string>

#include "agent/api/conventions/quoted.h"
#include "agent/api/services/stored_resources.h"
#include "agent/policy/endpoint.h"
#include "agent/policy/route_matcher.h"

namespace kib::api {
namespace {

Error invalid(const std::string& field, const std::string& what) {
  return Error{Code::invalid_argument, "network_policy." + field + ": " + what};
}

Status check_limits(const ctrl::NetworkPolicy& p) {
  if (p.egresses_size() > kMaxRoutes) return invalid("egresses", "at most " + std::to_string(kMaxRoutes) + " entries");
  for (int i = 0; i < p.egresses_size(); ++i) {
    const auto& r = p.egresses(i);
    std::string f = "egresses[" + std::to_string(i) + "]";
    if (r.egress_id().empty()) return invalid(f + ".egress_id", "is required");
    if (r.destinations_size() > kMaxDestinationsPerRoute)
      return invalid(f + ".destinations", "at most " + std::to_string(kMaxDestinationsPerRoute) + " entries");
    if (r.ports_size() > kMaxPortRangesPerRoute)
      return invalid(f + ".ports", "at most " + std::to_string(kMaxPortRangesPerRoute) + " entries");
  }
  if (p.resolvers_size() > kMaxResolvers)
    return invalid("resolvers", "at most " + std::to_string(kMaxResolvers) + " entries");
  return {};
}

Status check_resolvers(const ctrl::NetworkPolicy& p) {
  for (int i = 0; i < p.resolvers_size(); ++i) {
    const auto& r = p.resolvers(i);
    std::string f = "resolvers[" + std::to_string(i) + "]";
    const std::string* address = nullptr;
    if (r.has_udp()) address = &r.udp().address();
    if (r.has_tcp()) address = &r.tcp().address();
    if (!address) return invalid(f, "exactly one transport (udp or tcp) is required");
    auto hp = policy::parse_ip_port(*address);
    if (!hp.ok()) return invalid(f + ".address", hp.error().message);
  }
  return {};
}

}  // namespace

Status validate_policy_shape(const ctrl::NetworkPolicy& p) {
  switch (p.mode()) {
    case ctrl::NETWORK_MODE_ISOLATED:
      // Decision: ISOLATED means "nothing leaves", so routes or resolvers in it would be
      // ignored; an operator's mistake is reported rather than silently dropped.
      if (p.egresses_size() || p.resolvers_size())
        return invalid("mode", "ISOLATED takes no egresses and no resolvers");
      return {};
    case ctrl::NETWORK_MODE_PUBLIC_INTERNET: break;
    default: return invalid("mode", "must be ISOLATED or PUBLIC_INTERNET");
  }
  KIB_TRY(check_limits(p));
  KIB_TRY(policy::RouteMatcher::compile(p));
  return check_resolvers(p);
}

Status check_policy_refs(store::Transaction& txn, const ctrl::NetworkPolicy& p) {
  for (const auto& r : policy_refs(p)) {
    KIB_TRY_ASSIGN(auto e, load_egress(txn, r.egress_id));
    if (!e.has_value()) return egress_not_found(r.egress_id);
    if (r.udp && !e->spec().udp_enabled())
      return Error{Code::failed_precondition, "network_policy.resolvers: a udp Resolver goes through egress " +
                                                  quoted(r.egress_id) + ", which does not have udp_enabled"};
  }
  return {};
}

std::vector<store::EgressRef> policy_refs(const ctrl::NetworkPolicy& p) {
  std::vector<store::EgressRef> refs;
  for (const auto& r : p.egresses()) refs.push_back({r.egress_id(), false});
  for (const auto& r : p.resolvers())
    if (!r.egress_id().empty()) refs.push_back({r.egress_id(), r.has_udp()});
  return refs;
}

}  // namespace kib::api
