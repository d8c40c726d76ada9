#pragma once
// An IP address with a port, in the kernel's own form: what the relay's dials pass
// to connect() as is, and what the DNS path keys its reply sockets by. One type for
// both, so that no caller converts or extracts ports by hand.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "agent/policy/ip_address.h"

namespace kib::policy {

struct SocketAddress {
  union {
    sockaddr sa;
    sockaddr_in v4;
    sockaddr_in6 v6;
  };

  // Zeroed: family AF_UNSPEC ("none"), or 0.0.0.0:0 where a family is implied.
  SocketAddress() : v6{} {}
  // scope_id: an IPv6 link-local address's interface (sin6_scope_id; 0 otherwise): a
  // guest asking its router's fe80::1 is answered from fe80::1 on that link only.
  static SocketAddress from(const IpAddress& ip, uint16_t port, uint32_t scope_id = 0);
  // AF_INET or AF_INET6 (anything else reads as an unspecified IPv4 address).
  static SocketAddress from_sockaddr(const sockaddr* sa);

  int family() const { return sa.sa_family; }
  socklen_t length() const { return sa.sa_family == AF_INET6 ? sizeof v6 : sizeof v4; }
  IpAddress ip() const { return IpAddress::from_sockaddr(&sa); }
  uint16_t port() const { return ntohs(sa.sa_family == AF_INET6 ? v6.sin6_port : v4.sin_port); }
  uint32_t scope_id() const { return sa.sa_family == AF_INET6 ? v6.sin6_scope_id : 0; }
  // The unspecified address (0.0.0.0 or ::), which RFC 1928 replies use to mean "the
  // address you are talking to".
  bool is_unspecified() const;
  std::string to_string() const;  // "192.0.2.1:53", "[2001:db8::1]:53"
  // Family, address, port and (IPv6) scope; nothing else of the sockaddr.
  bool operator==(const SocketAddress& o) const;
};

struct SocketAddressHash {
  size_t operator()(const SocketAddress& a) const;
};

}  // namespace kib::policy
