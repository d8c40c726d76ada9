#include "agent/policy/ip_address.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>

using kib::Code;
using kib::policy::Cidr;
using kib::policy::IpAddress;

namespace {
IpAddress ip(const char* s) {
  auto r = IpAddress::parse(s);
  REQUIRE_MESSAGE(r.ok(), std::string(s));
  return *r;
}
}  // namespace

TEST_CASE("ip address parses IPv4 and IPv6 literals and prints them back") {
  CHECK(ip("192.0.2.1").family == AF_INET);
  CHECK(ip("192.0.2.1").to_string() == "192.0.2.1");
  CHECK(ip("2001:db8::1").family == AF_INET6);
  CHECK(ip("2001:DB8:0:0::1").to_string() == "2001:db8::1");
  CHECK(ip("::ffff:10.0.0.1").to_string() == "::ffff:10.0.0.1");
  CHECK(ip("10.0.0.1").bit_length() == 32);
  CHECK(ip("::").bit_length() == 128);
}

TEST_CASE("ip address rejects anything that is not a plain literal") {
  for (const char* bad : {"", " 1.2.3.4", "1.2.3.4 ", "1.2.3", "1.2.3.4.5", "256.0.0.1", "010.0.0.1", "0x7f.0.0.1",
                          "127.1", "[::1]", "fe80::1%eth0", "::1/128", "host", "1.2.3.4:80", "::g"}) {
    auto r = IpAddress::parse(bad);
    CHECK_MESSAGE(!r.ok(), std::string(bad));
    if (!r.ok()) CHECK(r.error().code == Code::invalid_argument);
  }
  CHECK(!IpAddress::parse(std::string_view("1.2.3.4\0", 8)).ok());
  CHECK(!IpAddress::parse(std::string(100, '1')).ok());
}

TEST_CASE("ip address from sockaddr reads both families") {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  inet_pton(AF_INET, "198.51.100.7", &in.sin_addr);
  CHECK(IpAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&in)) == ip("198.51.100.7"));
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::7", &in6.sin6_addr);
  CHECK(IpAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&in6)) == ip("2001:db8::7"));
}

TEST_CASE("unmap_v4 turns an IPv4-mapped address into IPv4 and leaves others alone") {
  CHECK(kib::policy::unmap_v4(ip("::ffff:192.0.2.9")) == ip("192.0.2.9"));
  CHECK(kib::policy::unmap_v4(ip("64:ff9b::c000:209")) == ip("64:ff9b::c000:209"));
  CHECK(kib::policy::unmap_v4(ip("192.0.2.9")) == ip("192.0.2.9"));
}

TEST_CASE("cidr parses prefixes and a bare address is a host route") {
  auto c = Cidr::parse("10.0.0.0/8");
  REQUIRE(c.ok());
  CHECK(c->prefix_len == 8);
  CHECK(c->to_string() == "10.0.0.0/8");
  CHECK(Cidr::parse("192.0.2.1")->prefix_len == 32);
  CHECK(Cidr::parse("2001:db8::1")->prefix_len == 128);
  CHECK(Cidr::parse("0.0.0.0/0")->prefix_len == 0);
  CHECK(Cidr::parse("::/0")->prefix_len == 0);
  CHECK(Cidr::parse("2001:db8::/32")->to_string() == "2001:db8::/32");
}

TEST_CASE("cidr prefix length outside the family range is invalid") {
  for (const char* bad : {"10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/08",
                          "10.0.0.0/8 ", "10.0.0.0/ 8", "10.0.0.0/1000", "/8", "10.0.0.0/8/8", "host/8"}) {
    auto r = Cidr::parse(bad);
    CHECK_MESSAGE(!r.ok(), std::string(bad));
    if (!r.ok()) CHECK(r.error().code == Code::invalid_argument);
  }
}

TEST_CASE("cidr with host bits set is invalid_argument, not silently widened") {
  auto r = Cidr::parse("10.0.0.1/8");
  REQUIRE(!r.ok());
  CHECK(r.error().code == Code::invalid_argument);
  CHECK(r.error().message.find("10.0.0.0/8") != std::string::npos);
  CHECK(!Cidr::parse("2001:db8::1/32").ok());
  CHECK(!Cidr::parse("192.168.1.128/24").ok());
  CHECK(Cidr::parse("192.168.1.128/25").ok());
}

TEST_CASE("cidr contains checks the prefix bits and never crosses families") {
  auto c = *Cidr::parse("100.64.0.0/10");
  CHECK(c.contains(ip("100.64.0.0")));
  CHECK(c.contains(ip("100.127.255.255")));
  CHECK(!c.contains(ip("100.63.255.255")));
  CHECK(!c.contains(ip("100.128.0.0")));
  CHECK(Cidr::parse("0.0.0.0/0")->contains(ip("255.255.255.255")));
  CHECK(!Cidr::parse("0.0.0.0/0")->contains(ip("::ffff:1.2.3.4")));
  CHECK(!Cidr::parse("::/0")->contains(ip("1.2.3.4")));
  CHECK(Cidr::parse("::/0")->contains(ip("ffff::1")));
  CHECK(Cidr::parse("2001:db8::/33")->contains(ip("2001:db8:7fff::1")));
  CHECK(!Cidr::parse("2001:db8::/33")->contains(ip("2001:db8:8000::")));
  CHECK(Cidr::parse("192.0.2.1")->contains(ip("192.0.2.1")));
  CHECK(!Cidr::parse("192.0.2.1")->contains(ip("192.0.2.2")));
}
