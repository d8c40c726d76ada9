#include "agent/policy/endpoint.h"

namespace kib::policy {
namespace {

constexpr size_t kMaxHostname = 253;  // RFC 1123 2.1 / RFC 1035 2.3.4
constexpr size_t kMaxLabel = 63;
constexpr size_t kMaxText = kMaxHostname + 8;  // "[" + host + "]:" + 5 digits

Error invalid(std::string message) { return make_error(Code::invalid_argument, std::move(message)); }

// Built by appending: `"\"" + std::string(...)` trips GCC 12's -Wrestrict false
// positive at -O3 (GCC PR 105329, 105651).
std::string quoted(std::string_view text) {
  std::string out = "\"";
  out += text.substr(0, 80);
  out += '"';
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Decimal 1..65535: digits only, no sign, no spaces, no leading zero.
Result<uint16_t> parse_port(std::string_view s, std::string_view text) {
  if (s.empty()) return invalid("address " + quoted(text) + " has an empty port");
  if (s.size() > 5 || (s.size() > 1 && s[0] == '0')) return invalid("address " + quoted(text) + " has a bad port");
  uint32_t v = 0;
  for (char c : s) {
    if (!is_digit(c)) return invalid("address " + quoted(text) + " has a non-numeric port");
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v < 1 || v > 65535) return invalid("address " + quoted(text) + " has a port outside 1-65535");
  return static_cast<uint16_t>(v);
}

bool valid_label(std::string_view label) {
  if (label.empty() || label.size() > kMaxLabel) return false;
  if (label.front() == '-' || label.back() == '-') return false;
  for (char c : label)
    if (!is_alnum(c) && c != '-') return false;
  return true;
}

bool all_digits(std::string_view s) {
  for (char c : s)
    if (!is_digit(c)) return false;
  return true;
}

// RFC 1123 host name: labels of 1-63 letters, digits and inner hyphens, <= 253 bytes,
// no trailing dot. A name whose last label is numeric ("10.0.0.01", "127.1") is
// refused: it is not a name (RFC 1123 2.1, RFC 3696 2) and resolvers would read it
// as an address, bypassing the literal's checks.
Status check_hostname(std::string_view host, std::string_view text) {
  if (host.size() > kMaxHostname) return invalid("host name in " + quoted(text) + " is longer than 253 bytes");
  size_t start = 0;
  std::string_view last;
  while (true) {
    const size_t dot = host.find('.', start);
    last = host.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!valid_label(last))
      return invalid("host " + quoted(host) +
                     " is not an IPv4 address, a bracketed IPv6 address or an RFC 1123 host name");
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (all_digits(last)) return invalid("host " + quoted(host) + " is neither a valid IPv4 address nor a host name");
  return {};
}

Result<HostPort> parse(std::string_view text, bool ip_only) {
  if (text.empty()) return invalid("address is empty; expected host:port");
  if (text.size() > kMaxText) return invalid("address " + quoted(text) + " is too long");
  HostPort hp;
  std::string_view port_text;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return invalid("address " + quoted(text) + " has no closing ']'");
    const std::string_view inner = text.substr(1, close - 1);
    if (inner.find('%') != std::string_view::npos)
      return invalid("address " + quoted(text) + " has an IPv6 zone id, which is not allowed");
    auto ip = IpAddress::parse(inner);
    if (!ip.ok() || ip->family != AF_INET6)
      return invalid("address " + quoted(text) + " has brackets around something that is not an IPv6 address");
    const std::string_view rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':')
      return invalid("address " + quoted(text) + " has no port; expected [ipv6]:port");
    hp.host = std::string(inner);
    hp.ip = *ip;
    port_text = rest.substr(1);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return invalid("address " + quoted(text) + " has no port; expected host:port");
    const std::string_view host = text.substr(0, colon);
    if (host.find(':') != std::string_view::npos)
      return invalid("address " + quoted(text) + " looks like an IPv6 address without brackets; write [ipv6]:port");
    if (host.empty()) return invalid("address " + quoted(text) + " has an empty host");
    auto ip = IpAddress::parse(host);
    if (ip.ok()) {
      hp.ip = *ip;
    } else if (ip_only) {
      return invalid("address " + quoted(text) + " must be an IP literal (ip:port, IPv6 in brackets)");
    } else {
      KIB_TRY(check_hostname(host, text));
    }
    hp.host = std::string(host);
    port_text = text.substr(colon + 1);
  }
  auto port = parse_port(port_text, text);
  if (!port.ok()) return std::move(port).error();
  hp.port = *port;
  return hp;
}

}  // namespace

Result<HostPort> parse_host_port(std::string_view text) { return parse(text, false); }

Result<HostPort> parse_ip_port(std::string_view text) { return parse(text, true); }

}  // namespace kib::policy
