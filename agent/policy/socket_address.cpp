#include "agent/policy/socket_address.h"

#include <cstring>
#include <string_view>

namespace kib::policy {

SocketAddress SocketAddress::from(const IpAddress& ip, uint16_t port, uint32_t scope_id) {
  SocketAddress a;
  if (ip.family == AF_INET6) {
    a.v6.sin6_family = AF_INET6;
    std::memcpy(&a.v6.sin6_addr, ip.bytes.data(), 16);
    a.v6.sin6_port = htons(port);
    a.v6.sin6_scope_id = scope_id;
  } else {
    a.v4.sin_family = AF_INET;
    std::memcpy(&a.v4.sin_addr, ip.bytes.data(), 4);
    a.v4.sin_port = htons(port);
  }
  return a;
}

SocketAddress SocketAddress::from_sockaddr(const sockaddr* sa) {
  SocketAddress a;
  if (sa->sa_family == AF_INET6) {
    std::memcpy(&a.v6, sa, sizeof a.v6);
    a.v6.sin6_flowinfo = 0;
  } else if (sa->sa_family == AF_INET) {
    std::memcpy(&a.v4, sa, sizeof a.v4);
  } else {
    a.v4.sin_family = AF_INET;
  }
  return a;
}

bool SocketAddress::is_unspecified() const {
  const IpAddress a = ip();
  const size_t n = a.family == AF_INET6 ? 16 : 4;
  for (size_t i = 0; i < n; ++i)
    if (a.bytes[i] != 0) return false;
  return true;
}

std::string SocketAddress::to_string() const {
  // Appended piecewise: `"[" + std::string(...)` trips GCC 12's -Wrestrict false
  // positive at -O3 (GCC PR 105329).
  std::string out;
  if (family() == AF_INET6) out += '[';
  out += ip().to_string();
  if (family() == AF_INET6) out += ']';
  out += ':';
  out += std::to_string(port());
  return out;
}

bool SocketAddress::operator==(const SocketAddress& o) const {
  return family() == o.family() && port() == o.port() && scope_id() == o.scope_id() && ip() == o.ip();
}

size_t SocketAddressHash::operator()(const SocketAddress& a) const {
  const IpAddress ip = a.ip();
  const std::string_view raw(reinterpret_cast<const char*>(ip.bytes.data()), ip.bytes.size());
  return std::hash<std::string_view>{}(raw) ^ (static_cast<size_t>(a.port()) << 1) ^ static_cast<size_t>(ip.family) ^
         (static_cast<size_t>(a.scope_id()) << 20);
}

}  // namespace kib::policy
