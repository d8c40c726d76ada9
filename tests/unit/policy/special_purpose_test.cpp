#include "agent/policy/special_purpose.h"

#include <doctest/doctest.h>

#include <set>

using kib::Code;
using kib::policy::Cidr;
using kib::policy::EndpointAddressPolicy;
using kib::policy::IpAddress;
using kib::policy::special_purpose_table;

namespace {

IpAddress ip(const std::string& s) {
  auto r = IpAddress::parse(s);
  REQUIRE_MESSAGE(r.ok(), s);
  return *r;
}

bool refused(const EndpointAddressPolicy& p, const std::string& s) { return !p.check(ip(s)).ok(); }

// The last address of c (host bits all ones).
IpAddress last_of(const Cidr& c) {
  IpAddress a = c.base;
  for (size_t bit = c.prefix_len; bit < a.bit_length(); ++bit)
    a.bytes[bit / 8] |= static_cast<uint8_t>(0x80u >> (bit % 8));
  return a;
}

// a + delta (delta = +1 or -1) within the family; false on wrap-around.
bool step(IpAddress& a, int delta) {
  for (size_t i = a.bit_length() / 8; i-- > 0;) {
    if (delta > 0 && a.bytes[i]++ != 0xFF) return true;
    if (delta < 0 && a.bytes[i]-- != 0x00) return true;
  }
  return false;
}

// The expectation for an address just outside a block: refused exactly when another
// block holds it (IPv4-mapped and NAT64 forms judged by their IPv4 address).
bool expected_refused(const IpAddress& a) {
  auto in_table = [](const IpAddress& x) {
    for (const auto& b : special_purpose_table())
      if (b.cidr.contains(x)) return true;
    return false;
  };
  for (const char* wrapper : {"::ffff:0:0/96", "64:ff9b::/96"}) {
    if (Cidr::parse(wrapper)->contains(a)) {
      IpAddress v4;
      v4.family = AF_INET;
      for (int i = 0; i < 4; ++i) v4.bytes[i] = a.bytes[12 + i];
      return in_table(v4);
    }
  }
  return in_table(a);
}

}  // namespace

TEST_CASE("special-purpose table holds every registry block and the API.md additions") {
  // Written out by hand from the IANA registries and API.md; the table must hold each.
  const char* expected[] = {"0.0.0.0/8",       "0.0.0.0/32",
                            "10.0.0.0/8",      "100.64.0.0/10",
                            "127.0.0.0/8",     "169.254.0.0/16",
                            "172.16.0.0/12",   "192.0.0.0/24",
                            "192.0.0.0/29",    "192.0.0.8/32",
                            "192.0.0.9/32",    "192.0.0.10/32",
                            "192.0.0.170/32",  "192.0.0.171/32",
                            "192.0.2.0/24",    "192.31.196.0/24",
                            "192.52.193.0/24", "192.88.99.0/24",
                            "192.168.0.0/16",  "192.175.48.0/24",
                            "198.18.0.0/15",   "198.51.100.0/24",
                            "203.0.113.0/24",  "224.0.0.0/4",
                            "240.0.0.0/4",     "255.255.255.255/32",
                            "::1/128",         "::/128",
                            "::/96",           "::ffff:0:0/96",
                            "64:ff9b::/96",    "64:ff9b:1::/48",
                            "100::/64",        "100:0:0:1::/64",
                            "2001::/23",       "2001::/32",
                            "2001:1::1/128",   "2001:1::2/128",
                            "2001:1::3/128",   "2001:2::/48",
                            "2001:3::/32",     "2001:4:112::/48",
                            "2001:10::/28",    "2001:20::/28",
                            "2001:30::/28",    "2001:db8::/32",
                            "2002::/16",       "2620:4f:8000::/48",
                            "3fff::/20",       "5f00::/16",
                            "fc00::/7",        "fe80::/10",
                            "fec0::/10",       "ff00::/8"};
  std::set<std::string> have;
  for (const auto& b : special_purpose_table()) {
    CHECK_MESSAGE(!b.name.empty(), b.cidr.to_string());
    have.insert(b.cidr.to_string());
  }
  for (const char* e : expected) CHECK_MESSAGE(have.count(Cidr::parse(e)->to_string()) == 1, std::string(e));
  CHECK(have.size() == std::size(expected));
}

TEST_CASE("every special-purpose block refuses its first and last address and not its outside neighbours") {
  const EndpointAddressPolicy policy;
  for (const auto& b : special_purpose_table()) {
    const std::string name = b.cidr.to_string();
    const IpAddress first = b.cidr.base;
    const IpAddress last = last_of(b.cidr);
    CHECK_MESSAGE(!policy.check(first).ok(), "first of " << name);
    CHECK_MESSAGE(!policy.check(last).ok(), "last of " << name);
    IpAddress before = first;
    if (step(before, -1)) {
      CHECK_MESSAGE(!b.cidr.contains(before), "before " << name);
      CHECK_MESSAGE(policy.check(before).ok() == !expected_refused(before),
                    "before " << name << ": " << before.to_string());
    }
    IpAddress after = last;
    if (step(after, +1)) {
      CHECK_MESSAGE(!b.cidr.contains(after), "after " << name);
      CHECK_MESSAGE(policy.check(after).ok() == !expected_refused(after),
                    "after " << name << ": " << after.to_string());
    }
  }
}

TEST_CASE("special-purpose edges, hand-written") {
  struct Case {
    const char* address;
    bool refused;
  };
  const Case cases[] = {
      // IPv4
      {"0.0.0.0", true},
      {"0.255.255.255", true},
      {"1.0.0.0", false},
      {"1.1.1.1", false},
      {"8.8.8.8", false},
      {"9.255.255.255", false},
      {"10.0.0.0", true},
      {"10.255.255.255", true},
      {"11.0.0.0", false},
      {"100.63.255.255", false},
      {"100.64.0.0", true},
      {"100.127.255.255", true},
      {"100.128.0.0", false},
      {"126.255.255.255", false},
      {"127.0.0.1", true},
      {"127.255.255.255", true},
      {"128.0.0.0", false},
      {"169.253.255.255", false},
      {"169.254.0.0", true},
      {"169.254.169.254", true},
      {"169.255.0.0", false},
      {"172.15.255.255", false},
      {"172.16.0.0", true},
      {"172.31.255.255", true},
      {"172.32.0.0", false},
      {"191.255.255.255", false},
      {"192.0.0.0", true},
      {"192.0.0.9", true},
      {"192.0.0.255", true},
      {"192.0.1.0", false},
      {"192.0.2.0", true},
      {"192.0.2.255", true},
      {"192.0.3.0", false},
      {"192.31.195.255", false},
      {"192.31.196.0", true},
      {"192.31.197.0", false},
      {"192.52.192.255", false},
      {"192.52.193.0", true},
      {"192.52.194.0", false},
      {"192.88.98.255", false},
      {"192.88.99.1", true},
      {"192.88.100.0", false},
      {"192.167.255.255", false},
      {"192.168.0.0", true},
      {"192.168.255.255", true},
      {"192.169.0.0", false},
      {"192.175.47.255", false},
      {"192.175.48.0", true},
      {"192.175.49.0", false},
      {"198.17.255.255", false},
      {"198.18.0.0", true},
      {"198.19.255.255", true},
      {"198.20.0.0", false},
      {"198.51.99.255", false},
      {"198.51.100.0", true},
      {"198.51.101.0", false},
      {"203.0.112.255", false},
      {"203.0.113.0", true},
      {"203.0.114.0", false},
      {"223.255.255.255", false},
      {"224.0.0.0", true},
      {"239.255.255.255", true},
      {"240.0.0.0", true},
      {"255.255.255.254", true},
      {"255.255.255.255", true},
      // IPv6 and IPv4 embedded in IPv6
      {"::", true},
      {"::1", true},
      {"::2", true},
      {"::8.8.8.8", true},
      {"::1:0:0:0", false},
      {"::ffff:10.0.0.1", true},
      {"::ffff:127.0.0.1", true},
      {"::ffff:8.8.8.8", false},
      {"::fffe:ffff:ffff", false},
      {"64:ff9b::808:808", false},
      {"64:ff9b::a00:1", true},
      {"64:ff9b::7f00:1", true},
      {"64:ff9b::c000:201", true},
      {"64:ff9b::1:0:0", false},
      {"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", false},
      {"64:ff9b:1::1", true},
      {"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", true},
      {"64:ff9b:2::", false},
      {"100::", true},
      {"100::ffff:ffff:ffff:ffff", true},
      {"100:0:0:1::", true},
      {"100:0:0:1:ffff:ffff:ffff:ffff", true},
      {"100:0:0:2::", false},
      {"ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false},
      {"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false},
      {"2001::1", true},
      {"2001:0:4136:e378:8000:63bf:3fff:fdd2", true},
      {"2001:1::1", true},
      {"2001:1::4", true},
      {"2001:4:112::", true},
      {"2001:4:113::", true},
      {"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", true},
      {"2001:200::", false},
      {"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", false},
      {"2001:db8::", true},
      {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", true},
      {"2001:db9::", false},
      {"2002::1", true},
      {"2002:808:808::1", true},
      {"2003::", false},
      {"2606:4700::1", false},
      {"2620:4f:7fff:ffff:ffff:ffff:ffff:ffff", false},
      {"2620:4f:8000::", true},
      {"2620:4f:8000:ffff:ffff:ffff:ffff:ffff", true},
      {"2620:4f:8001::", false},
      {"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false},
      {"3fff::", true},
      {"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", true},
      {"3fff:1000::", false},
      {"5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false},
      {"5f00::", true},
      {"5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},
      {"5f01::", false},
      {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false},
      {"fc00::", true},
      {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},
      {"fe00::", false},
      {"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false},
      {"fe80::", true},
      {"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},
      {"fec0::", true},
      {"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},
      {"ff00::", true},
      {"ff02::1", true},
      {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},
  };
  static_assert(std::size(cases) >= 60);
  const EndpointAddressPolicy policy;
  for (const auto& c : cases) CHECK_MESSAGE(refused(policy, c.address) == c.refused, std::string(c.address));
}

TEST_CASE("a refused address is invalid_argument naming the address and the block") {
  const EndpointAddressPolicy policy;
  auto st = policy.check(ip("10.0.0.1"));
  REQUIRE(!st.ok());
  CHECK(st.error().code == Code::invalid_argument);
  CHECK(
      st.error().message ==
      "address 10.0.0.1 is in the special-purpose block 10.0.0.0/8 (private-use (RFC 1918)); an operator may allow it "
      "with egress.allowed_special_purpose_cidrs");
  // The most specific block is named.
  CHECK(policy.check(ip("192.0.0.9")).error().message.find("192.0.0.9/32") != std::string::npos);
  CHECK(policy.check(ip("2001::1")).error().message.find("2001::/32 (TEREDO") != std::string::npos);
  CHECK(policy.check(ip("::1")).error().message.find("::1/128 (loopback") != std::string::npos);
  // An embedded IPv4 address is named with its IPv4 block.
  const auto msg = policy.check(ip("::ffff:10.0.0.1")).error().message;
  CHECK(msg.find("10.0.0.1") != std::string::npos);
  CHECK(msg.find("10.0.0.0/8") != std::string::npos);
}

TEST_CASE("6to4, Teredo and local-use NAT64 are refused outright whatever IPv4 they carry") {
  const EndpointAddressPolicy policy;
  CHECK(refused(policy, "2002:808:808::1"));                       // 6to4 of 8.8.8.8
  CHECK(refused(policy, "2001:0:4136:e378:8000:63bf:f7f7:f7f7"));  // Teredo, client 8.8.8.8
  CHECK(refused(policy, "64:ff9b:1::808:808"));
}

TEST_CASE("exempted CIDRs pass, checked before classification and against the unwrapped IPv4") {
  auto p = EndpointAddressPolicy::from_strings({"10.0.0.0/8", "2002::/16", "fd00:1::/64"});
  REQUIRE(p.ok());
  CHECK(!refused(*p, "10.1.2.3"));
  CHECK(!refused(*p, "::ffff:10.1.2.3"));
  CHECK(!refused(*p, "64:ff9b::a01:203"));
  CHECK(!refused(*p, "2002::1"));
  CHECK(!refused(*p, "fd00:1::5"));
  CHECK(refused(*p, "fd00:2::5"));
  CHECK(refused(*p, "172.16.0.1"));
  CHECK(refused(*p, "::ffff:172.16.0.1"));
  CHECK(refused(*p, "11.0.0.0") == false);
  // The deprecated IPv4-compatible form is not unwrapped: exempting 10/8 does not
  // exempt ::10.1.2.3.
  CHECK(refused(*p, "::10.1.2.3"));
  CHECK(refused(EndpointAddressPolicy(), "10.1.2.3"));
}

TEST_CASE("exemptions that are not CIDRs are invalid_argument") {
  auto p = EndpointAddressPolicy::from_strings({"10.0.0.0/8", "10.0.0.1/8"});
  REQUIRE(!p.ok());
  CHECK(p.error().code == Code::invalid_argument);
  CHECK(!EndpointAddressPolicy::from_strings({"nope"}).ok());
}
