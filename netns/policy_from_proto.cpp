#include "netns/policy_from_proto.h"

namespace kib::netns {
namespace {

namespace v1 = ::kibotos::ctrl::v1;

Result<CoveredRoute> route_from_proto(const v1::EgressRoute& e, int index) {
  CoveredRoute r;
  for (const auto& d : e.destinations()) {
    auto p = Prefix::parse(d);
    if (!p.ok()) return make_error(Code::invalid_argument, "egresses[" + std::to_string(index) + "]: " + p.error().message);
    r.destinations.push_back(*p);
  }
  for (const auto& pr : e.ports()) {
    if (pr.first() == 0 || pr.first() > pr.last() || pr.last() > 65535)
      return make_error(Code::invalid_argument, "egresses[" + std::to_string(index) + "]: bad port range");
    r.ports.push_back(PortRange{static_cast<uint16_t>(pr.first()), static_cast<uint16_t>(pr.last())});
  }
  return r;
}

}  // namespace

Result<RulesetPolicy> ruleset_policy_from_proto(const v1::NetworkPolicy& policy) {
  RulesetPolicy out;
  switch (policy.mode()) {
    case v1::NETWORK_MODE_ISOLATED: out.mode = NetworkMode::isolated; break;
    case v1::NETWORK_MODE_PUBLIC_INTERNET: out.mode = NetworkMode::public_internet; break;
    default: return make_error(Code::invalid_argument, "network_policy.mode must be ISOLATED or PUBLIC_INTERNET");
  }
  for (int i = 0; i < policy.egresses_size(); ++i) {
    auto r = route_from_proto(policy.egresses(i), i);
    if (!r.ok()) return std::move(r).error();
    out.routes.push_back(std::move(*r));
  }
  out.intercept_dns = policy.resolvers_size() > 0;
  return out;
}

}  // namespace kib::netns
