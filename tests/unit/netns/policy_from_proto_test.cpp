#include <doctest/doctest.h>

#include "netns/policy_from_proto.h"

namespace v1 = kibotos::ctrl::v1;
using kib::netns::NetworkMode;
using kib::netns::ruleset_policy_from_proto;

TEST_CASE("an unspecified mode is invalid_argument") {
  v1::NetworkPolicy p;
  auto r = ruleset_policy_from_proto(p);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == kib::Code::invalid_argument);
}

TEST_CASE("routes keep their order, CIDRs and port ranges; resolvers turn DNS interception on") {
  v1::NetworkPolicy p;
  p.set_mode(v1::NETWORK_MODE_PUBLIC_INTERNET);
  auto* a = p.add_egresses();
  a->set_egress_id("a");
  a->add_destinations("10.0.0.0/8");
  a->add_destinations("2001:db8::/32");
  auto* pr = a->add_ports();
  pr->set_first(80);
  pr->set_last(443);
  auto* b = p.add_egresses();
  b->set_egress_id("b");
  b->add_destinations("0.0.0.0/0");
  auto r = ruleset_policy_from_proto(p);
  REQUIRE(r.ok());
  CHECK(r->mode == NetworkMode::public_internet);
  REQUIRE(r->routes.size() == 2);
  CHECK(r->routes[0].destinations.size() == 2);
  CHECK(r->routes[0].ports.size() == 1);
  CHECK(r->routes[0].ports[0].first == 80);
  CHECK(r->routes[1].destinations[0].to_string() == "0.0.0.0/0");
  CHECK(r->routes[1].ports.empty());
  CHECK(r->routes[0].destinations[1].to_string() == "2001:db8::/32");
  CHECK_FALSE(r->intercept_dns);
  p.add_resolvers()->mutable_udp()->set_address("10.0.0.53:53");
  CHECK(ruleset_policy_from_proto(p)->intercept_dns);
}

TEST_CASE("a bad CIDR or port range names its entry") {
  v1::NetworkPolicy p;
  p.set_mode(v1::NETWORK_MODE_ISOLATED);
  p.add_egresses()->add_destinations("10.0.0.0/8");
  p.add_egresses()->add_destinations("10.0.0.1/8");
  auto r = ruleset_policy_from_proto(p);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("egresses[1]") != std::string::npos);
  v1::NetworkPolicy q;
  q.set_mode(v1::NETWORK_MODE_ISOLATED);
  auto* e = q.add_egresses();
  e->add_destinations("10.0.0.0/8");
  auto* pr = e->add_ports();
  pr->set_first(90);
  pr->set_last(80);
  CHECK_FALSE(ruleset_policy_from_proto(q).ok());
  pr->set_first(0);
  pr->set_last(0);
  CHECK_FALSE(ruleset_policy_from_proto(q).ok());
  pr->set_first(1);
  pr->set_last(65536);
  CHECK_FALSE(ruleset_policy_from_proto(q).ok());
}
