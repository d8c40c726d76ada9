#include "netns/policy_from_proto.h"

namespace kib::netns {

namespace v1 = ::kibotos::ctrl::v1;

CoveredRoute covered_route(const policy::CompiledRoute& route) {
  CoveredRoute r;
  for (const auto& c : route.destinations) r.destinations.push_back(Prefix{c.base.family, c.base.bytes, c.prefix_len});
  for (const auto& p : route.ports) r.ports.push_back(PortRange{p.first, p.last});
  return r;
}

Result<RulesetPolicy> ruleset_policy_from_proto(const v1::NetworkPolicy& policy) {
  RulesetPolicy out;
  switch (policy.mode()) {
    case v1::NETWORK_MODE_ISOLATED: out.mode = NetworkMode::isolated; break;
    case v1::NETWORK_MODE_PUBLIC_INTERNET: out.mode = NetworkMode::public_internet; break;
    default: return make_error(Code::invalid_argument, "network_policy.mode must be ISOLATED or PUBLIC_INTERNET");
  }
  auto matcher = policy::RouteMatcher::compile(policy);
  if (!matcher.ok()) return std::move(matcher).error();
  for (const auto& route : matcher->routes()) out.routes.push_back(covered_route(route));
  out.intercept_dns = policy.resolvers_size() > 0;
  return out;
}

}  // namespace kib::netns
