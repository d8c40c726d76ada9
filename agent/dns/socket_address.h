#pragma once
// An IP address with a port, and its conversion to and from the kernel's sockaddr.
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <string>

#include "agent/policy/ip_address.h"

namespace kib::dns {

struct SocketAddress {
  policy::IpAddress ip;
  uint16_t port = 0;
  // An IPv6 link-local address's interface (sin6_scope_id; 0 otherwise): a guest
  // asking its router's fe80::1 is answered from fe80::1 on that link only.
  uint32_t scope_id = 0;

  static SocketAddress from_sockaddr(const sockaddr* sa);
  // Fills storage and returns the length to pass to the kernel.
  socklen_t to_sockaddr(sockaddr_storage& storage) const;
  // The unspecified address (0.0.0.0 or ::), which RFC 1928 replies use to mean "the
  // address you are talking to".
  bool is_unspecified() const;
  std::string to_string() const;  // "192.0.2.1:53", "[2001:db8::1]:53"
  bool operator==(const SocketAddress&) const = default;
};

struct SocketAddressHash {
  size_t operator()(const SocketAddress& a) const;
};

}  // namespace kib::dns
