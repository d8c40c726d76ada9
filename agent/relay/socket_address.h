#pragma once
// The relay names policy::SocketAddress (agent/policy/socket_address.h) in its own
// namespace, as its dials and probes pass it to the kernel.
#include "agent/policy/socket_address.h"

namespace kib::relay {

using policy::SocketAddress;

inline SocketAddress to_socket_address(const policy::IpAddress& ip, uint16_t port) {
  return SocketAddress::from(ip, port);
}

}  // namespace kib::relay
