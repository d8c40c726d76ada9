#include <doctest/doctest.h>

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
