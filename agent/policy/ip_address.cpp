#include "agent/policy/ip_address.h"

#include <arpa/inet.h>

#include <cstring>

namespace kib::policy {
namespace {

// Longest textual IPv6 address (with an embedded IPv4 tail) is 45 bytes.
constexpr size_t kMaxAddressText = INET6_ADDRSTRLEN;

Error bad(std::string_view what, std::string_view text) {
  return make_error(Code::invalid_argument, std::string(what) + " \"" + std::string(text.substr(0, 64)) + "\"");
}

// Parses 1-3 decimal digits (no sign, no spaces) into a prefix length.
bool parse_prefix(std::string_view s, unsigned& out) {
  if (s.empty() || s.size() > 3) return false;
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (s.size() > 1 && s[0] == '0') return false;  // "/08" is a typo, not 8
  out = v;
  return true;
}

}  // namespace

Result<IpAddress> IpAddress::parse(std::string_view text) {
  if (text.empty() || text.size() >= kMaxAddressText || text.find('\0') != std::string_view::npos)
    return bad("not an IP address:", text);
  const std::string z(text);  // inet_pton needs a NUL-terminated string
  IpAddress a;
  if (inet_pton(AF_INET, z.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET;
    return a;
  }
  // inet_pton rejects brackets and zone ids ("fe80::1%eth0"), as we want.
  if (inet_pton(AF_INET6, z.c_str(), a.bytes.data()) == 1) {
    a.family = AF_INET6;
    return a;
  }
  return bad("not an IP address:", text);
}

IpAddress IpAddress::from_sockaddr(const sockaddr* sa) {
  IpAddress a;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    a.family = AF_INET;
    std::memcpy(a.bytes.data(), &in->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    a.family = AF_INET6;
    std::memcpy(a.bytes.data(), &in6->sin6_addr, 16);
  }
  return a;
}

std::string IpAddress::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(family, bytes.data(), buf, sizeof buf) == nullptr) return "?";
  return buf;
}

Result<Cidr> Cidr::parse(std::string_view text) {
  const size_t slash = text.find('/');
  auto addr = IpAddress::parse(text.substr(0, slash));
  if (!addr.ok()) return bad("not a CIDR:", text);
  Cidr c;
  c.base = *addr;
  unsigned len = static_cast<unsigned>(c.base.bit_length());
  if (slash != std::string_view::npos) {
    if (!parse_prefix(text.substr(slash + 1), len) || len > c.base.bit_length())
      return bad("bad prefix length in CIDR", text);
  }
  c.prefix_len = static_cast<uint8_t>(len);
  Cidr masked = c;
  for (size_t bit = len; bit < c.base.bit_length(); ++bit)
    masked.base.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
  if (!(masked.base == c.base))
    return make_error(Code::invalid_argument, "CIDR \"" + std::string(text) + "\" has host bits set (did you mean " +
                                                  masked.to_string() + "?)");
  return c;
}

bool Cidr::contains(const IpAddress& a) const {
  if (a.family != base.family) return false;
  const size_t full = prefix_len / 8;
  if (std::memcmp(a.bytes.data(), base.bytes.data(), full) != 0) return false;
  const unsigned rest = prefix_len % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<uint8_t>(0xFFu << (8 - rest));
  return (a.bytes[full] & mask) == (base.bytes[full] & mask);
}

IpAddress unmap_v4(const IpAddress& a) {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (a.family != AF_INET6) return a;
  for (size_t i = 0; i < 12; ++i)
    if (a.bytes[i] != kMapped[i]) return a;
  IpAddress v4;
  v4.family = AF_INET;
  for (size_t i = 0; i < 4; ++i) v4.bytes[i] = a.bytes[12 + i];
  return v4;
}

std::string Cidr::to_string() const { return base.to_string() + "/" + std::to_string(prefix_len); }

}  // namespace kib::policy
