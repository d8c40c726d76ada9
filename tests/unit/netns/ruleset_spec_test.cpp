#include <doctest/doctest.h>
#include <sys/socket.h>

#include "netns/ruleset_spec.h"

using kib::netns::Prefix;

TEST_CASE("a CIDR parses to its family, address and length") {
  auto v4 = Prefix::parse("10.0.0.0/8");
  REQUIRE(v4.ok());
  CHECK(v4->family == AF_INET);
  CHECK(v4->length == 8);
  CHECK(v4->to_string() == "10.0.0.0/8");
  auto v6 = Prefix::parse("2001:DB8::/32");
  REQUIRE(v6.ok());
  CHECK(v6->family == AF_INET6);
  CHECK(v6->to_string() == "2001:db8::/32");
}

TEST_CASE("a bare address is a host prefix") {
  CHECK(Prefix::parse("192.0.2.1")->to_string() == "192.0.2.1/32");
  CHECK(Prefix::parse("::1")->to_string() == "::1/128");
}

TEST_CASE("the default routes parse") {
  CHECK(Prefix::parse("0.0.0.0/0")->to_string() == "0.0.0.0/0");
  CHECK(Prefix::parse("::/0")->to_string() == "::/0");
}

TEST_CASE("host bits set are invalid_argument, never widened") {
  auto r = Prefix::parse("10.1.2.3/8");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == kib::Code::invalid_argument);
  CHECK_FALSE(Prefix::parse("2001:db8::1/32").ok());
}

TEST_CASE("bad text and bad lengths are invalid_argument") {
  for (const char* bad : {"", "10.0.0.0/", "10.0.0.0/33", "::/129", "10.0.0.0/8x", "example.com", "10.0.0.0/-1",
                          "10.0.0.0/8; drop", "{ 0.0.0.0/0 }"}) {
    CAPTURE(bad);
    auto r = Prefix::parse(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == kib::Code::invalid_argument);
  }
}

TEST_CASE("containment holds within a family only") {
  auto a = *Prefix::parse("10.0.0.0/8");
  CHECK(a.contains(*Prefix::parse("10.1.0.0/16")));
  CHECK(a.contains(a));
  CHECK_FALSE(Prefix::parse("10.1.0.0/16")->contains(a));
  CHECK_FALSE(a.contains(*Prefix::parse("11.0.0.0/16")));
  CHECK_FALSE(Prefix::parse("0.0.0.0/0")->contains(*Prefix::parse("::/0")));
}

namespace {
Prefix host(const char* text) { return *Prefix::parse(text); }
}  // namespace

TEST_CASE("intercepts_tcp follows the table: covered prefix and port in public_internet, DNS when intercepted") {
  using kib::netns::CoveredRoute;
  using kib::netns::NetworkMode;
  using kib::netns::RulesetPolicy;
  RulesetPolicy p;
  p.mode = NetworkMode::public_internet;
  p.routes.push_back(CoveredRoute{{host("10.0.0.0/8")}, {{80, 80}, {8000, 8080}}});
  p.routes.push_back(CoveredRoute{{host("2001:db8::/32")}, {}});
  CHECK(p.intercepts_tcp(host("10.1.2.3"), 80));
  CHECK(p.intercepts_tcp(host("10.1.2.3"), 8000));
  CHECK(p.intercepts_tcp(host("10.1.2.3"), 8080));
  CHECK_FALSE(p.intercepts_tcp(host("10.1.2.3"), 79));
  CHECK_FALSE(p.intercepts_tcp(host("10.1.2.3"), 8081));
  CHECK_FALSE(p.intercepts_tcp(host("11.1.2.3"), 80));
  CHECK(p.intercepts_tcp(host("2001:db8::5"), 1));  // no ports: every port
  CHECK_FALSE(p.intercepts_tcp(host("2001:db9::5"), 1));
  // Families never mix: ::ffff:10.1.2.3 is not 10.0.0.0/8 in the table either.
  CHECK_FALSE(p.intercepts_tcp(host("::ffff:10.1.2.3"), 80));
  CHECK_FALSE(p.intercepts_tcp(host("192.0.2.1"), 53));
  p.intercept_dns = true;
  CHECK(p.intercepts_tcp(host("192.0.2.1"), 53));
  // Isolated: routes are ignored (nothing leaves), DNS is still intercepted.
  p.mode = NetworkMode::isolated;
  CHECK_FALSE(p.intercepts_tcp(host("10.1.2.3"), 80));
  CHECK(p.intercepts_tcp(host("192.0.2.1"), 53));
}

namespace {
kib::netns::RulesetPolicy public_policy(std::vector<kib::netns::CoveredRoute> routes, bool dns = false) {
  kib::netns::RulesetPolicy p;
  p.mode = kib::netns::NetworkMode::public_internet;
  p.routes = std::move(routes);
  p.intercept_dns = dns;
  return p;
}
}  // namespace

// Updates that take nothing away skip the TIME_WAIT sweep (a dump of the kernel's
// whole TCP table): covers_all_of must never say yes when something was taken away.
TEST_CASE("covers_all_of: an added destination or port range covers the policy before it") {
  using kib::netns::CoveredRoute;
  auto before = public_policy({CoveredRoute{{host("10.0.0.0/8")}, {{80, 80}}}});
  CHECK(public_policy({CoveredRoute{{host("10.0.0.0/8"), host("192.0.2.0/24")}, {{80, 80}}}}).covers_all_of(before));
  CHECK(public_policy({CoveredRoute{{host("10.0.0.0/8")}, {{80, 80}, {443, 443}}}}).covers_all_of(before));
  CHECK(public_policy({CoveredRoute{{host("0.0.0.0/0")}, {}}}).covers_all_of(before));  // wider prefix, every port
  CHECK(public_policy({CoveredRoute{{host("192.0.2.0/24")}, {}}, CoveredRoute{{host("10.0.0.0/8")}, {{1, 1000}}}})
            .covers_all_of(before));
  CHECK(before.covers_all_of(before));
}

TEST_CASE("covers_all_of: a destination, port, DNS or mode taken away does not") {
  using kib::netns::CoveredRoute;
  auto before = public_policy({CoveredRoute{{host("10.0.0.0/8"), host("2001:db8::/32")}, {{80, 80}}}}, true);
  CHECK_FALSE(public_policy({CoveredRoute{{host("10.0.0.0/8")}, {{80, 80}}}}, true).covers_all_of(before));
  CHECK_FALSE(public_policy({CoveredRoute{{host("10.0.0.0/9"), host("2001:db8::/32")}, {{80, 80}}}}, true)
                  .covers_all_of(before));
  CHECK_FALSE(public_policy({CoveredRoute{{host("10.0.0.0/8"), host("2001:db8::/32")}, {{81, 81}}}}, true)
                  .covers_all_of(before));
  CHECK_FALSE(public_policy({CoveredRoute{{host("10.0.0.0/8"), host("2001:db8::/32")}, {{80, 80}}}}, false)
                  .covers_all_of(before));
  auto isolated = public_policy({CoveredRoute{{host("0.0.0.0/0")}, {}}}, true);
  isolated.mode = kib::netns::NetworkMode::isolated;
  CHECK_FALSE(isolated.covers_all_of(before));
  // An entry with every port is not within one that lists ports.
  auto every_port = public_policy({CoveredRoute{{host("10.0.0.0/8")}, {}}});
  CHECK_FALSE(public_policy({CoveredRoute{{host("10.0.0.0/8")}, {{1, 65534}}}}).covers_all_of(every_port));
  // From isolated, only DNS was intercepted.
  auto was_isolated = isolated;
  CHECK(public_policy({}, true).covers_all_of(was_isolated));
  CHECK_FALSE(public_policy({}, false).covers_all_of(was_isolated));
}
