#include "agent/policy/endpoint.h"

#include <doctest/doctest.h>

using kib::Code;
using kib::policy::parse_host_port;
using kib::policy::parse_ip_port;

namespace {
void check_invalid(std::string_view text, const char* fragment = nullptr) {
  auto r = parse_host_port(text);
  CHECK_MESSAGE(!r.ok(), std::string(text));
  if (r.ok()) return;
  CHECK(r.error().code == Code::invalid_argument);
  if (fragment != nullptr) CHECK_MESSAGE(r.error().message.find(fragment) != std::string::npos, r.error().message);
}
}  // namespace

TEST_CASE("endpoint accepts IPv4 host:port") {
  auto r = parse_host_port("203.0.113.5:1080");
  REQUIRE(r.ok());
  CHECK(r->host == "203.0.113.5");
  CHECK(r->port == 1080);
  REQUIRE(r->ip.has_value());
  CHECK(r->ip->to_string() == "203.0.113.5");
}

TEST_CASE("endpoint accepts bracketed IPv6 and stores the host without brackets") {
  auto r = parse_host_port("[2001:db8::1]:443");
  REQUIRE(r.ok());
  CHECK(r->host == "2001:db8::1");
  CHECK(r->port == 443);
  REQUIRE(r->ip.has_value());
  CHECK(r->ip->family == AF_INET6);
  CHECK(parse_host_port("[::ffff:192.0.2.1]:1")->ip->to_string() == "::ffff:192.0.2.1");
}

TEST_CASE("endpoint accepts an RFC 1123 host name") {
  auto r = parse_host_port("socks.example.com:1080");
  REQUIRE(r.ok());
  CHECK(r->host == "socks.example.com");
  CHECK(!r->ip.has_value());
  CHECK(parse_host_port("localhost:1")->port == 1);
  CHECK(parse_host_port("a-b.c0.9x:65535")->port == 65535);
  CHECK(parse_host_port("3com.com:80").ok());  // labels may start with a digit (RFC 1123 2.1)
  CHECK(parse_host_port("A.EXAMPLE.Org:80").ok());
}

TEST_CASE("endpoint host name is at most 253 bytes with labels of 1 to 63") {
  const std::string l63(63, 'a');
  const std::string name253 = l63 + "." + l63 + "." + l63 + "." + std::string(61, 'b');  // 253
  REQUIRE(name253.size() == 253);
  CHECK(parse_host_port(name253 + ":80").ok());
  check_invalid(name253 + "b:80", "253");
  CHECK(parse_host_port(l63 + ".com:80").ok());
  check_invalid(std::string(64, 'a') + ".com:80");
  check_invalid("a..b:80");
  check_invalid(".a:80");
  check_invalid("a.:80");  // no trailing dot
  check_invalid("-a.com:80");
  check_invalid("a-.com:80");
  check_invalid("a_b.com:80");
  check_invalid("a b.com:80");
  check_invalid("exa\xc3\xa9mple.com:80");
  check_invalid(std::string_view("a\0b.com:80", 10));
}

TEST_CASE("endpoint host that looks numeric but is not an IPv4 address is refused") {
  check_invalid("10.0.0.01:80");
  check_invalid("127.1:80");
  check_invalid("0x7f.0.0.1:80");
  check_invalid("256.1.1.1:80");
  check_invalid("1.2.3.4.5:80");
  check_invalid("4294967295:80");
}

TEST_CASE("endpoint port is decimal 1 to 65535 without sign or junk") {
  check_invalid("example.com:0", "1-65535");
  check_invalid("example.com:65536", "1-65535");
  check_invalid("example.com:99999");
  check_invalid("example.com:-1");
  check_invalid("example.com:+80");
  check_invalid("example.com: 80");
  check_invalid("example.com:80 ");
  check_invalid("example.com:0x50");
  check_invalid("example.com:080");
  check_invalid("example.com:8o");
  check_invalid("example.com:123456");
  check_invalid("example.com:", "empty port");
  CHECK(parse_host_port("example.com:65535").ok());
  CHECK(parse_host_port("example.com:1").ok());
}

TEST_CASE("endpoint rejects empty input, a missing port and a missing host") {
  check_invalid("", "empty");
  check_invalid("example.com", "no port");
  check_invalid("203.0.113.5", "no port");
  check_invalid(":80", "empty host");
  check_invalid("[2001:db8::1]", "no port");
  check_invalid("[2001:db8::1]80");
}

TEST_CASE("endpoint rejects unbracketed IPv6, zone ids and bad brackets") {
  check_invalid("2001:db8::1:80", "brackets");
  check_invalid("::1", "brackets");
  check_invalid("[fe80::1%eth0]:80", "zone");
  check_invalid("fe80::1%eth0:80");
  check_invalid("[203.0.113.5]:80");
  check_invalid("[example.com]:80");
  check_invalid("[2001:db8::1:80");
  check_invalid("[[2001:db8::1]]:80");
  check_invalid("[]:80");
}

TEST_CASE("endpoint rejects oversized input") { check_invalid(std::string(100000, 'a') + ":80", "too long"); }

TEST_CASE("ip:port form requires an IP literal") {
  auto v4 = parse_ip_port("127.0.0.1:53");
  REQUIRE(v4.ok());
  CHECK(v4->ip->to_string() == "127.0.0.1");
  auto v6 = parse_ip_port("[::1]:5353");
  REQUIRE(v6.ok());
  CHECK(v6->port == 5353);
  auto name = parse_ip_port("dns.example.com:53");
  REQUIRE(!name.ok());
  CHECK(name.error().code == Code::invalid_argument);
  CHECK(!parse_ip_port("127.0.0.1").ok());
  CHECK(!parse_ip_port("::1:53").ok());
}
