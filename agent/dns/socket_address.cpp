#include "agent/dns/socket_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string_view>

namespace kib::dns {

SocketAddress SocketAddress::from_sockaddr(const sockaddr* sa) {
  SocketAddress out;
  if (sa->sa_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(sa);
    out.ip.family = AF_INET6;
    std::memcpy(out.ip.bytes.data(), &s6->sin6_addr, 16);
    out.port = ntohs(s6->sin6_port);
    out.scope_id = s6->sin6_scope_id;
  } else {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(sa);
    out.ip.family = AF_INET;
    std::memcpy(out.ip.bytes.data(), &s4->sin_addr, 4);
    out.port = ntohs(s4->sin_port);
  }
  return out;
}

socklen_t SocketAddress::to_sockaddr(sockaddr_storage& storage) const {
  std::memset(&storage, 0, sizeof storage);
  if (ip.family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&storage);
    s6->sin6_family = AF_INET6;
    std::memcpy(&s6->sin6_addr, ip.bytes.data(), 16);
    s6->sin6_port = htons(port);
    s6->sin6_scope_id = scope_id;
    return sizeof(sockaddr_in6);
  }
  auto* s4 = reinterpret_cast<sockaddr_in*>(&storage);
  s4->sin_family = AF_INET;
  std::memcpy(&s4->sin_addr, ip.bytes.data(), 4);
  s4->sin_port = htons(port);
  return sizeof(sockaddr_in);
}

bool SocketAddress::is_unspecified() const {
  const size_t n = ip.family == AF_INET6 ? 16 : 4;
  for (size_t i = 0; i < n; ++i)
    if (ip.bytes[i] != 0) return false;
  return true;
}

std::string SocketAddress::to_string() const {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(ip.family, ip.bytes.data(), text, sizeof text);
  // Appended piecewise: `"[" + std::string(...)` trips GCC 12's -Wrestrict false
  // positive at -O3 (GCC PR 105329).
  std::string out;
  if (ip.family == AF_INET6) out += '[';
  out += text;
  if (ip.family == AF_INET6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

size_t SocketAddressHash::operator()(const SocketAddress& a) const {
  const std::string_view raw(reinterpret_cast<const char*>(a.ip.bytes.data()), a.ip.bytes.size());
  return std::hash<std::string_view>{}(raw) ^ (static_cast<size_t>(a.port) << 1) ^
         static_cast<size_t>(a.ip.family) ^ (static_cast<size_t>(a.scope_id) << 20);
}

}  // namespace kib::dns
