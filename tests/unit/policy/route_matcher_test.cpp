#include "agent/policy/route_matcher.h"

#include <doctest/doctest.h>

using kib::Code;
using kib::policy::IpAddress;
using kib::policy::RouteMatcher;
namespace v1 = kibotos::ctrl::v1;

namespace {

IpAddress ip(const char* s) {
  auto r = IpAddress::parse(s);
  REQUIRE_MESSAGE(r.ok(), std::string(s));
  return *r;
}

struct Ports {
  uint32_t first, last;
};

void add_route(v1::NetworkPolicy& p, const std::string& egress, std::vector<std::string> cidrs,
               std::vector<Ports> ports = {}) {
  auto* e = p.add_egresses();
  e->set_egress_id(egress);
  for (auto& c : cidrs) e->add_destinations(c);
  for (auto& r : ports) {
    auto* pr = e->add_ports();
    pr->set_first(r.first);
    pr->set_last(r.last);
  }
}

RouteMatcher compile(const v1::NetworkPolicy& p) {
  auto m = RouteMatcher::compile(p);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  return std::move(*m);
}

}  // namespace

TEST_CASE("coverage: an empty policy covers nothing") {
  auto m = compile(v1::NetworkPolicy());
  CHECK(!m.match(ip("1.2.3.4"), 443).has_value());
  CHECK(m.routes().empty());
}

TEST_CASE("coverage: IPv4 destination inside a CIDR is covered, outside is not") {
  v1::NetworkPolicy p;
  add_route(p, "e1", {"198.51.100.0/24"});
  auto m = compile(p);
  CHECK(m.match(ip("198.51.100.1"), 80) == 0u);
  CHECK(m.match(ip("198.51.100.255"), 80) == 0u);
  CHECK(!m.match(ip("198.51.101.0"), 80).has_value());
  CHECK(m.routes()[0].egress_id == "e1");
}

TEST_CASE("coverage: IPv6 destination inside a CIDR is covered, outside is not") {
  v1::NetworkPolicy p;
  add_route(p, "e6", {"2001:db8::/32"});
  auto m = compile(p);
  CHECK(m.match(ip("2001:db8::1"), 443) == 0u);
  CHECK(!m.match(ip("2001:db9::1"), 443).has_value());
}

TEST_CASE("coverage: entries are matched in list order and the first covering one wins") {
  v1::NetworkPolicy p;
  add_route(p, "narrow", {"10.1.0.0/16"}, {{443, 443}});
  add_route(p, "wide", {"10.0.0.0/8"});
  add_route(p, "shadowed", {"10.1.2.0/24"});
  auto m = compile(p);
  CHECK(m.match(ip("10.1.2.3"), 443) == 0u);
  CHECK(m.match(ip("10.1.2.3"), 80) == 1u);  // narrow's port does not cover 80
  CHECK(m.match(ip("10.9.9.9"), 443) == 1u);
  CHECK(!m.match(ip("11.0.0.1"), 443).has_value());
}

TEST_CASE("coverage: port ranges are inclusive and any range may cover") {
  v1::NetworkPolicy p;
  add_route(p, "e", {"0.0.0.0/0"}, {{80, 80}, {8000, 8999}});
  auto m = compile(p);
  CHECK(m.match(ip("1.2.3.4"), 80) == 0u);
  CHECK(!m.match(ip("1.2.3.4"), 79).has_value());
  CHECK(!m.match(ip("1.2.3.4"), 81).has_value());
  CHECK(m.match(ip("1.2.3.4"), 8000) == 0u);
  CHECK(m.match(ip("1.2.3.4"), 8999) == 0u);
  CHECK(!m.match(ip("1.2.3.4"), 9000).has_value());
}

TEST_CASE("coverage: no port ranges means every port") {
  v1::NetworkPolicy p;
  add_route(p, "e", {"192.0.2.0/24"});
  auto m = compile(p);
  CHECK(m.match(ip("192.0.2.1"), 1) == 0u);
  CHECK(m.match(ip("192.0.2.1"), 65535) == 0u);
  CHECK(m.routes()[0].ports.empty());
}

TEST_CASE("coverage: 0.0.0.0/0 covers all IPv4 and no IPv6, ::/0 all IPv6 and no IPv4") {
  v1::NetworkPolicy p4;
  add_route(p4, "v4", {"0.0.0.0/0"});
  auto m4 = compile(p4);
  CHECK(m4.match(ip("0.0.0.0"), 1) == 0u);
  CHECK(m4.match(ip("255.255.255.255"), 1) == 0u);
  CHECK(!m4.match(ip("2001:db8::1"), 1).has_value());
  v1::NetworkPolicy p6;
  add_route(p6, "v6", {"::/0"});
  auto m6 = compile(p6);
  CHECK(m6.match(ip("::"), 1) == 0u);
  CHECK(m6.match(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), 1) == 0u);
  CHECK(!m6.match(ip("1.2.3.4"), 1).has_value());
}

TEST_CASE("coverage: one entry may list CIDRs of both families") {
  v1::NetworkPolicy p;
  add_route(p, "both", {"203.0.113.0/24", "2001:db8::/32"});
  auto m = compile(p);
  CHECK(m.match(ip("203.0.113.9"), 22) == 0u);
  CHECK(m.match(ip("2001:db8::9"), 22) == 0u);
}

TEST_CASE("coverage: an IPv4-mapped destination is matched as its IPv4 address") {
  // What a dual-stack socket reports for an IPv4 peer must route like that peer.
  v1::NetworkPolicy p;
  add_route(p, "v6all", {"::/0"}, {{1, 1}});
  add_route(p, "v4", {"10.0.0.0/8"});
  auto m = compile(p);
  CHECK(m.match(ip("::ffff:10.0.0.1"), 80) == 1u);
  CHECK(m.match(ip("::ffff:10.0.0.1"), 1) == 1u);  // not the ::/0 entry
  CHECK(!m.match(ip("::ffff:11.0.0.1"), 80).has_value());
}

TEST_CASE("coverage: compile refuses a bad CIDR, naming the entry index") {
  v1::NetworkPolicy p;
  add_route(p, "ok", {"10.0.0.0/8"});
  add_route(p, "bad", {"10.0.0.0/8", "10.0.0.1/8"});
  auto m = RouteMatcher::compile(p);
  REQUIRE(!m.ok());
  CHECK(m.error().code == Code::invalid_argument);
  CHECK(m.error().message.find("egresses[1]") != std::string::npos);
  CHECK(m.error().message.find("destinations[1]") != std::string::npos);
  v1::NetworkPolicy q;
  add_route(q, "bad", {"example.com"});
  CHECK(!RouteMatcher::compile(q).ok());
}

TEST_CASE("coverage: compile refuses an entry without destinations") {
  v1::NetworkPolicy p;
  add_route(p, "empty", {});
  auto m = RouteMatcher::compile(p);
  REQUIRE(!m.ok());
  CHECK(m.error().code == Code::invalid_argument);
  CHECK(m.error().message.find("egresses[0]") != std::string::npos);
}

TEST_CASE("coverage: compile refuses port ranges outside 1 <= first <= last <= 65535") {
  for (Ports bad : {Ports{0, 10}, Ports{10, 5}, Ports{1, 65536}, Ports{70000, 70001}, Ports{0, 0}}) {
    v1::NetworkPolicy p;
    add_route(p, "ok", {"10.0.0.0/8"});
    add_route(p, "bad", {"10.0.0.0/8"}, {{80, 80}, bad});
    auto m = RouteMatcher::compile(p);
    REQUIRE(!m.ok());
    CHECK(m.error().code == Code::invalid_argument);
    CHECK(m.error().message.find("egresses[1]") != std::string::npos);
    CHECK(m.error().message.find("ports[1]") != std::string::npos);
  }
  v1::NetworkPolicy edge;
  add_route(edge, "edge", {"10.0.0.0/8"}, {{1, 65535}, {7, 7}});
  CHECK(RouteMatcher::compile(edge).ok());
}
