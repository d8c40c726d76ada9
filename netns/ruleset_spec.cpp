#include "netns/ruleset_spec.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <charconv>

namespace kib::netns {

Result<Prefix> Prefix::parse(std::string_view text) {
  auto bad = [&](const char* why) {
    return make_error(Code::invalid_argument, "invalid CIDR \"" + std::string(text) + "\": " + why);
  };
  std::string_view host = text;
  std::string_view len_text;
  if (auto slash = text.find('/'); slash != std::string_view::npos) {
    host = text.substr(0, slash);
    len_text = text.substr(slash + 1);
  }
  Prefix p;
  std::string host_str(host);
  if (inet_pton(AF_INET, host_str.c_str(), p.addr.data()) == 1) {
    p.family = AF_INET;
  } else if (inet_pton(AF_INET6, host_str.c_str(), p.addr.data()) == 1) {
    p.family = AF_INET6;
  } else {
    return bad("not an IPv4 or IPv6 address");
  }
  unsigned max = p.family == AF_INET ? 32 : 128;
  unsigned len = max;
  if (!len_text.empty() || text.find('/') != std::string_view::npos) {
    auto [ptr, ec] = std::from_chars(len_text.data(), len_text.data() + len_text.size(), len);
    if (ec != std::errc() || ptr != len_text.data() + len_text.size() || len > max) return bad("bad prefix length");
  }
  p.length = static_cast<uint8_t>(len);
  for (unsigned bit = len; bit < max; ++bit)
    if (p.addr[bit / 8] & (0x80 >> (bit % 8))) return bad("host bits set");
  return p;
}

std::string Prefix::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, addr.data(), buf, sizeof buf);
  return std::string(buf) + "/" + std::to_string(length);
}

bool Prefix::contains(const Prefix& other) const {
  if (family != other.family || other.length < length) return false;
  for (unsigned bit = 0; bit < length; ++bit) {
    uint8_t m = 0x80 >> (bit % 8);
    if ((addr[bit / 8] & m) != (other.addr[bit / 8] & m)) return false;
  }
  return true;
}

bool RulesetPolicy::intercepts_tcp(const Prefix& host, uint16_t port) const {
  if (intercept_dns && port == 53) return true;
  if (mode != NetworkMode::public_internet) return false;
  for (const auto& r : routes) {
    bool port_ok = r.ports.empty();
    for (const auto& span : r.ports) port_ok = port_ok || (port >= span.first && port <= span.last);
    if (!port_ok) continue;
    for (const auto& d : r.destinations)
      if (d.contains(host)) return true;
  }
  return false;
}

namespace {

bool ports_within(const std::vector<PortRange>& inner, const std::vector<PortRange>& outer) {
  if (outer.empty()) return true;  // every port
  if (inner.empty()) return false;
  for (const auto& span : inner) {
    bool inside = false;
    for (const auto& o : outer) inside = inside || (span.first >= o.first && span.last <= o.last);
    if (!inside) return false;
  }
  return true;
}

}  // namespace

bool RulesetPolicy::covers_all_of(const RulesetPolicy& before) const {
  if (before.intercept_dns && !intercept_dns) return false;
  if (before.mode != NetworkMode::public_internet) return true;  // only DNS was intercepted
  for (const auto& old : before.routes) {
    for (const auto& d : old.destinations) {
      bool covered = false;
      for (const auto& r : routes) {
        if (mode != NetworkMode::public_internet || !ports_within(old.ports, r.ports)) continue;
        for (const auto& n : r.destinations) covered = covered || n.contains(d);
      }
      if (!covered) return false;
    }
  }
  return true;
}

}  // namespace kib::netns
