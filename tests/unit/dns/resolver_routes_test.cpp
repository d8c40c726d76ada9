#include <doctest/doctest.h>

#include "agent/dns/dns_service.h"
#include "agent/dns/workspace_dns.h"

using namespace kib::dns;
namespace ctrl = ::kibotos::ctrl::v1;

TEST_CASE("resolvers are read in order with transport, address and Egress") {
  ctrl::NetworkPolicy p;
  auto* a = p.add_resolvers();
  a->mutable_udp()->set_address("10.0.0.53:53");
  auto* b = p.add_resolvers();
  b->mutable_tcp()->set_address("[fd00::53]:5353");
  b->set_egress_id("e1");
  auto routes = resolver_routes(p);
  REQUIRE(routes.ok());
  REQUIRE(routes->size() == 2);
  CHECK_FALSE((*routes)[0].tcp);
  CHECK((*routes)[0].address.to_string() == "10.0.0.53:53");
  CHECK((*routes)[0].egress_id.empty());
  CHECK((*routes)[1].tcp);
  CHECK((*routes)[1].address.to_string() == "[fd00::53]:5353");
  CHECK((*routes)[1].egress_id == "e1");
}

TEST_CASE("a resolver address that is not ip:port is invalid_argument naming the entry") {
  ctrl::NetworkPolicy p;
  p.add_resolvers()->mutable_udp()->set_address("10.0.0.53:53");
  p.add_resolvers()->mutable_udp()->set_address("dns.example:53");
  auto routes = resolver_routes(p);
  REQUIRE_FALSE(routes.ok());
  CHECK(routes.error().code == kib::Code::invalid_argument);
  CHECK(routes.error().message.find("resolvers[1]") != std::string::npos);
}

TEST_CASE("an association's error is shown on its Egress's status entry") {
  WorkspaceDnsStatus dns;
  ResolverState r;
  r.address = "udp 10.0.0.53:53 via e1";
  r.egress_id = "e1";
  r.last_error = "association: socks5: auth_failed";
  dns.resolvers.push_back(r);
  ctrl::NetworkPolicyStatus st;
  st.add_egresses()->set_egress_id("e1");
  auto* other = st.add_egresses();
  other->set_egress_id("e2");
  add_dns_status(dns, st);
  CHECK(st.egresses(0).last_error().find("auth_failed") != std::string::npos);
  CHECK(st.egresses(1).last_error().empty());
}

TEST_CASE("the status line names counters, failures by reason and each resolver") {
  WorkspaceDnsStatus dns;
  dns.counters.queries = 3;
  dns.counters.fail(FailureReason::timeout);
  dns.max_in_flight = 4096;
  ResolverState r;
  r.address = "tcp 10.0.0.53:53";
  r.channel = "ready";
  dns.resolvers.push_back(r);
  const std::string line = describe_dns_status(dns);
  CHECK(line.find("queries=3") != std::string::npos);
  CHECK(line.find("failed_timeout=1") != std::string::npos);
  CHECK(line.find("in_flight=0/4096") != std::string::npos);
  CHECK(line.find("tcp 10.0.0.53:53: ready") != std::string::npos);
}
