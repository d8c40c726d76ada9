// network_policy_status.dns: every field of a workspace's DNS status lands in its own
// proto field; the association error still shows on its Egress's entry.
#include <doctest/doctest.h>

#include <tuple>

#include "agent/dns/dns_status.h"

using namespace kib::dns;
namespace ctrl = ::kibotos::ctrl::v1;

namespace {

// Distinct values everywhere, so a field copied into the wrong place shows.
WorkspaceDnsStatus sample() {
  WorkspaceDnsStatus s;
  s.policy_revision = 3;
  s.counters.queries = 101;
  s.counters.answers = 102;
  s.counters.timeouts = 103;
  s.counters.failovers = 104;
  for (size_t i = 0; i < kFailureReasonCount; ++i) s.counters.failures[i] = 201 + i;
  s.in_flight = 7;
  s.max_in_flight = 4099;
  ResolverState a;
  a.tcp = false;
  a.address = "10.0.0.53:53";
  a.egress_id.append("e1");  // not `= "e1"`: GCC 12 -O3 -Wmaybe-uninitialized false positive
  a.state = "associated";
  a.relay_address = "10.0.0.1:40000";
  a.egress_revision = 5;
  a.last_error = "association: socks5: auth_failed";
  ResolverState b;
  b.tcp = true;
  b.address = "[fd00::53]:5353";
  b.state = "connecting";
  s.resolvers = {a, b};
  return s;
}

}  // namespace

TEST_CASE("every counter of a workspace's DNS lands in its own status field") {
  ctrl::NetworkPolicyStatus st;
  add_dns_status(sample(), st);
  REQUIRE(st.has_dns());
  const auto& d = st.dns();
  CHECK(d.queries() == 101);
  CHECK(d.answers() == 102);
  CHECK(d.timeouts() == 103);
  CHECK(d.failovers() == 104);
  CHECK(d.in_flight() == 7);
  CHECK(d.max_in_flight() == 4099);
}

TEST_CASE("failures are counted by reason name, every reason present") {
  ctrl::NetworkPolicyStatus st;
  add_dns_status(sample(), st);
  const auto& f = st.dns().failures();
  CHECK(f.size() == kFailureReasonCount);
  CHECK(f.at("inflight_cap") == 201);
  CHECK(f.at("malformed_query") == 202);
  CHECK(f.at("malformed_answer") == 203);
  CHECK(f.at("unknown_answer") == 204);
  CHECK(f.at("upstream_error") == 205);
  CHECK(f.at("timeout") == 206);
}

TEST_CASE("each resolver's channel is shown in policy order with every field") {
  ctrl::NetworkPolicyStatus st;
  add_dns_status(sample(), st);
  REQUIRE(st.dns().resolvers_size() == 2);
  const auto& a = st.dns().resolvers(0);
  CHECK(a.address() == "10.0.0.53:53");
  CHECK(a.transport() == "udp");
  CHECK(a.egress_id() == "e1");
  CHECK(a.state() == "associated");
  CHECK(a.relay_address() == "10.0.0.1:40000");
  CHECK(a.egress_revision() == 5);
  CHECK(a.last_error() == "association: socks5: auth_failed");
  const auto& b = st.dns().resolvers(1);
  CHECK(b.address() == "[fd00::53]:5353");
  CHECK(b.transport() == "tcp");
  CHECK(b.egress_id().empty());
  CHECK(b.state() == "connecting");
  CHECK(b.relay_address().empty());
  CHECK(b.egress_revision() == 0);
  CHECK(b.last_error().empty());
}

TEST_CASE("a policy without resolvers has no dns status") {
  WorkspaceDnsStatus s;
  s.counters.queries = 1;
  ctrl::NetworkPolicyStatus st;
  add_dns_status(s, st);
  CHECK_FALSE(st.has_dns());
}

TEST_CASE("an association's error is shown on its Egress's status entry") {
  ctrl::NetworkPolicyStatus st;
  st.add_egresses()->set_egress_id("e1");
  st.add_egresses()->set_egress_id("e2");
  add_dns_status(sample(), st);
  CHECK(st.egresses(0).last_error() == "dns udp 10.0.0.53:53 via e1: association: socks5: auth_failed");
  CHECK(st.egresses(1).last_error().empty());
}

TEST_CASE("an Egress only resolvers use gets an entry: the revision DNS holds, the error, no connections") {
  auto dns = sample();
  dns.resolvers[0].egress_held = 6;
  ctrl::NetworkPolicyStatus st;
  add_dns_status(dns, st);
  REQUIRE(st.egresses_size() == 1);  // the second resolver has no Egress
  const auto& e = st.egresses(0);
  CHECK(e.egress_id() == "e1");
  CHECK(e.applied_revision() == 6);
  CHECK(e.last_error() == "dns udp 10.0.0.53:53 via e1: association: socks5: auth_failed");
  CHECK(e.active_connections() == 0);
  CHECK(e.draining_connections() == 0);
}

TEST_CASE("an Egress a route and a resolver use reports a revision once both apply it") {
  for (auto row : {std::tuple<uint64_t, uint64_t, uint64_t>{7, 6, 6}, {6, 7, 6}, {7, 7, 7}}) {
    // Named, not structured bindings: CAPTURE captures them (clang 14 cannot).
    const uint64_t route = std::get<0>(row), held = std::get<1>(row), want = std::get<2>(row);
    CAPTURE(route);
    CAPTURE(held);
    auto dns = sample();
    dns.resolvers[0].egress_held = held;
    ctrl::NetworkPolicyStatus st;
    auto* e = st.add_egresses();
    e->set_egress_id("e1");
    e->set_applied_revision(route);
    e->set_active_connections(4);
    add_dns_status(dns, st);
    REQUIRE(st.egresses_size() == 1);
    CHECK(e->applied_revision() == want);
    CHECK(e->active_connections() == 4);
  }
}

TEST_CASE("an Egress's own error is not replaced by a DNS one") {
  ctrl::NetworkPolicyStatus st;
  auto* e = st.add_egresses();
  e->set_egress_id("e1");
  e->set_last_error("connect: refused");
  add_dns_status(sample(), st);
  CHECK(e->last_error() == "connect: refused");
}

TEST_CASE("the status line names counters, failures by reason and each resolver") {
  WorkspaceDnsStatus dns;
  dns.counters.queries = 3;
  dns.counters.fail(FailureReason::timeout);
  dns.max_in_flight = 4096;
  ResolverState r;
  r.tcp = true;
  r.address = "10.0.0.53:53";
  r.state = "ready";
  dns.resolvers.push_back(r);
  ResolverState u;
  u.address = "10.0.0.54:53";
  u.egress_id.append("e1");  // (see above)
  u.state = "associated";
  u.relay_address = "10.0.0.1:40000";
  dns.resolvers.push_back(u);
  const std::string line = describe_dns_status(dns);
  CHECK(line.find("queries=3") != std::string::npos);
  CHECK(line.find("failed_timeout=1") != std::string::npos);
  CHECK(line.find("in_flight=0/4096") != std::string::npos);
  CHECK(line.find("tcp 10.0.0.53:53: ready") != std::string::npos);
  CHECK(line.find("udp 10.0.0.54:53 via e1: associated (relay 10.0.0.1:40000)") != std::string::npos);
}
