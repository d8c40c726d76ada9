#include "agent/policy/route_matcher.h"

namespace kib::policy {
namespace {

Error invalid(size_t index, const std::string& what) {
  return make_error(Code::invalid_argument, "network_policy.egresses[" + std::to_string(index) + "]: " + what);
}

Result<CompiledRoute> compile_route(size_t index, const ::kibotos::ctrl::v1::EgressRoute& route) {
  CompiledRoute out;
  out.egress_id = route.egress_id();
  if (route.destinations().empty()) return invalid(index, "destinations must list at least one CIDR");
  for (int i = 0; i < route.destinations_size(); ++i) {
    auto c = Cidr::parse(route.destinations(i));
    if (!c.ok()) return invalid(index, "destinations[" + std::to_string(i) + "]: " + c.error().message);
    out.destinations.push_back(*c);
  }
  for (int i = 0; i < route.ports_size(); ++i) {
    const auto& p = route.ports(i);
    if (p.first() < 1 || p.last() > 65535 || p.first() > p.last())
      return invalid(index, "ports[" + std::to_string(i) + "]: range " + std::to_string(p.first()) + "-" +
                                std::to_string(p.last()) + " must satisfy 1 <= first <= last <= 65535");
    out.ports.push_back({static_cast<uint16_t>(p.first()), static_cast<uint16_t>(p.last())});
  }
  return out;
}

bool covers(const CompiledRoute& r, const IpAddress& dst, uint16_t port) {
  bool addr = false;
  for (const auto& c : r.destinations)
    if (c.contains(dst)) {
      addr = true;
      break;
    }
  if (!addr) return false;
  if (r.ports.empty()) return true;  // "no ranges: every port"
  for (const auto& p : r.ports)
    if (port >= p.first && port <= p.last) return true;
  return false;
}

}  // namespace

Result<RouteMatcher> RouteMatcher::compile(const ::kibotos::ctrl::v1::NetworkPolicy& policy) {
  RouteMatcher m;
  for (int i = 0; i < policy.egresses_size(); ++i) {
    KIB_TRY_ASSIGN(auto r, compile_route(static_cast<size_t>(i), policy.egresses(i)));
    m.routes_.push_back(std::move(r));
  }
  return m;
}

// Families are never mixed: a v4 destination is covered only by v4 CIDRs and a v6
// one only by v6 CIDRs. A guest's IPv4-mapped destination (::ffff:a.b.c.d, seen on a
// v6 socket) is matched as the IPv4 address it reaches, so "0.0.0.0/0" covers it and
// "::/0" alone does not let it escape a v4 route's decision.
std::optional<size_t> RouteMatcher::match(const IpAddress& dst, uint16_t port) const {
  const IpAddress target = unmap_v4(dst);
  for (size_t i = 0; i < routes_.size(); ++i)
    if (covers(routes_[i], target, port)) return i;
  return std::nullopt;
}

}  // namespace kib::policy
