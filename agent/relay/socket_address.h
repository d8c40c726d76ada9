#pragma once
// A socket address of either family, as the relay's dials and probes pass it to the
// kernel.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "agent/policy/ip_address.h"

namespace kib::relay {

union SocketAddress {
  sockaddr sa;
  sockaddr_in v4;
  sockaddr_in6 v6;
  socklen_t length() const { return sa.sa_family == AF_INET6 ? sizeof v6 : sizeof v4; }
};

inline SocketAddress to_socket_address(const policy::IpAddress& ip, uint16_t port) {
  SocketAddress a{};
  if (ip.family == AF_INET6) {
    a.v6.sin6_family = AF_INET6;
    std::memcpy(&a.v6.sin6_addr, ip.bytes.data(), 16);
    a.v6.sin6_port = htons(port);
  } else {
    a.v4.sin_family = AF_INET;
    std::memcpy(&a.v4.sin_addr, ip.bytes.data(), 4);
    a.v4.sin_port = htons(port);
  }
  return a;
}

}  // namespace kib::relay
