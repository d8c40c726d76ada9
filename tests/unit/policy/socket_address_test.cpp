// One socket-address type for the relay and the DNS path, in the kernel's form.
#include <doctest/doctest.h>

#include <arpa/inet.h>

#include <unordered_set>

#include "agent/policy/socket_address.h"

using kib::policy::IpAddress;
using kib::policy::SocketAddress;
using kib::policy::SocketAddressHash;

namespace {
IpAddress ip(const char* text) { return *IpAddress::parse(text); }
}  // namespace

TEST_CASE("a socket address is passed to the kernel as it is stored") {
  const SocketAddress v4 = SocketAddress::from(ip("192.0.2.1"), 53);
  CHECK(v4.family() == AF_INET);
  CHECK(v4.length() == sizeof(sockaddr_in));
  CHECK(ntohs(v4.v4.sin_port) == 53);
  const SocketAddress v6 = SocketAddress::from(ip("fe80::1"), 5353, 7);
  CHECK(v6.family() == AF_INET6);
  CHECK(v6.length() == sizeof(sockaddr_in6));
  CHECK(v6.v6.sin6_scope_id == 7);
}

TEST_CASE("address, port and scope read back from either family") {
  const SocketAddress v6 = SocketAddress::from(ip("2001:db8::1"), 1080);
  CHECK(v6.ip() == ip("2001:db8::1"));
  CHECK(v6.port() == 1080);
  CHECK(v6.scope_id() == 0);
  CHECK(v6.to_string() == "[2001:db8::1]:1080");
  CHECK(SocketAddress::from(ip("198.51.100.7"), 443).to_string() == "198.51.100.7:443");
  CHECK(SocketAddress::from_sockaddr(&v6.sa) == v6);
}

TEST_CASE("the unspecified address means the peer's own in RFC 1928 replies") {
  CHECK(SocketAddress::from(ip("0.0.0.0"), 9).is_unspecified());
  CHECK(SocketAddress::from(ip("::"), 9).is_unspecified());
  CHECK_FALSE(SocketAddress::from(ip("::1"), 9).is_unspecified());
}

TEST_CASE("equal addresses are equal whatever else the sockaddr holds") {
  SocketAddress a = SocketAddress::from(ip("2001:db8::1"), 53);
  SocketAddress b = a;
  b.v6.sin6_flowinfo = htonl(42);
  CHECK(a == b);
  CHECK(SocketAddressHash{}(a) == SocketAddressHash{}(b));
  CHECK_FALSE(a == SocketAddress::from(ip("2001:db8::1"), 54));
  CHECK_FALSE(SocketAddress::from(ip("fe80::1"), 53, 2) == SocketAddress::from(ip("fe80::1"), 53, 3));
  std::unordered_set<SocketAddress, SocketAddressHash> set{a, SocketAddress::from(ip("192.0.2.1"), 53)};
  CHECK(set.count(b) == 1);
}
