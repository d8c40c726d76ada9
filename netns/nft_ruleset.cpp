#include "netns/nft_ruleset.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdio>

namespace kib::netns {
namespace {

std::string hex_mark(uint32_t mark) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", mark);
  return buf;
}

std::string port_set(const std::vector<PortRange>& ports) {
  std::string out = "{ ";
  for (size_t i = 0; i < ports.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ports[i].first);
    if (ports[i].last != ports[i].first) {
      out += '-';  // not `"-" + std::to_string()`: GCC 12 -Wrestrict false positive at -O3 (PR 105329)
      out += std::to_string(ports[i].last);
    }
  }
  return out + " }";
}

std::string prefix_set(const std::vector<Prefix>& prefixes, int family) {
  std::string out;
  for (const auto& p : prefixes) {
    if (p.family != family) continue;
    out += out.empty() ? "{ " : ", ";
    out += p.to_string();
  }
  return out.empty() ? out : out + " }";
}

struct Lines {
  std::string text;
  void add(const std::string& line) { text += "\t\t" + line + "\n"; }
};

// "ip daddr {..}" / "ip6 daddr {..}" for one family of a route, or empty.
std::string daddr_match(const CoveredRoute& r, int family) {
  std::string set = prefix_set(r.destinations, family);
  if (set.empty()) return set;
  return std::string(family == AF_INET ? "ip" : "ip6") + " daddr " + set;
}

std::string tcp_match(const CoveredRoute& r) {
  return r.ports.empty() ? "meta l4proto tcp" : "tcp dport " + port_set(r.ports);
}

// Other IP traffic to the covered destination: port-carrying protocols on the
// covered ports, or every non-TCP protocol when all ports are covered.
std::string other_match(const CoveredRoute& r) {
  if (r.ports.empty()) return "meta l4proto != tcp";
  return "meta l4proto { udp, udplite, sctp, dccp } th dport " + port_set(r.ports);
}

const char* reject_stmt() { return "reject with icmpx admin-prohibited"; }

void prerouting_dns(Lines& l, const RulesetParams& p, const std::string& mark) {
  struct Kind {
    const char* proto;
    uint16_t port;
  };
  for (Kind k : {Kind{"udp", p.ports.dns_udp}, Kind{"tcp", p.ports.dns_tcp}}) {
    if (k.port != 0) {
      std::string port = std::to_string(k.port);
      l.add(std::string("meta nfproto ipv4 ") + k.proto + " dport 53 meta mark set " + mark + " tproxy ip to :" + port +
            " accept");
      l.add(std::string("meta nfproto ipv6 ") + k.proto + " dport 53 meta mark set " + mark +
            " tproxy ip6 to :" + port + " accept");
    }
    l.add(std::string(k.proto) + " dport 53 drop");
  }
}

// The listeners are bound to the wildcard address; only TPROXY may reach them, not a
// guest connecting to the namespace's own address and the listener's port.
void listener_guard(Lines& l, const TproxyPorts& ports) {
  std::string tcp;
  for (uint16_t port : {ports.tcp, ports.dns_tcp})
    if (port != 0) tcp += (tcp.empty() ? "" : ", ") + std::to_string(port);
  if (!tcp.empty()) l.add("fib daddr type local tcp dport { " + tcp + " } drop");
  if (ports.dns_udp != 0) l.add("fib daddr type local udp dport " + std::to_string(ports.dns_udp) + " drop");
}

void prerouting_route(Lines& l, const CoveredRoute& r, const RulesetParams& p, const std::string& mark) {
  for (int family : {AF_INET, AF_INET6}) {
    std::string dst = daddr_match(r, family);
    if (dst.empty()) continue;
    std::string tcp = dst + " " + tcp_match(r);
    if (p.ports.tcp != 0)
      l.add(tcp + " meta mark set " + mark + " tproxy " + (family == AF_INET ? "ip" : "ip6") +
            " to :" + std::to_string(p.ports.tcp) + " accept");
    l.add(tcp + " drop");
    l.add(dst + " " + other_match(r) + " " + reject_stmt());
  }
}

std::string prerouting_chain(const RulesetParams& p, const std::vector<CoveredRoute>& routes) {
  std::string mark = hex_mark(p.mark);
  Lines l;
  l.add("type filter hook prerouting priority mangle; policy accept;");
  l.add("iif \"lo\" meta mark != " + mark + " return");
  l.add("ct direction reply return");
  listener_guard(l, p.ports);
  // Connections the agent already holds stay with it whatever the policy now says:
  // a policy update drains them in the data plane, they never leave directly. Not a
  // new SYN: one that reuses the 4-tuple of a connection the agent closed first would
  // match its TIME_WAIT socket, which answers with an ACK (the guest resets and
  // retries later); tproxy below reopens TIME_WAIT onto the listener instead.
  l.add("tcp flags & (syn | ack) != syn socket transparent 1 meta mark set " + mark + " accept");
  if (p.policy.intercept_dns) prerouting_dns(l, p, mark);
  l.add("fib daddr type { local, broadcast, multicast } return");
  for (const auto& r : routes) prerouting_route(l, r, p, mark);
  return "\tchain prerouting {\n" + l.text + "\t}\n";
}

std::string output_chain(const RulesetParams& p, const std::vector<CoveredRoute>& routes) {
  std::string mark = hex_mark(p.mark);
  Lines l;
  l.add("type route hook output priority mangle; policy accept;");
  l.add("oif \"lo\" return");
  l.add("ct direction reply return");
  // Marked packets are routed again (route chain) through lo into prerouting. The
  // conntrack mark keeps a connection intercepted once on that path (as the socket
  // match does in prerouting), across policy updates.
  std::string intercept = "meta mark set " + mark + " ct mark set " + mark + " accept";
  l.add("ct mark " + mark + " meta mark set " + mark + " accept");
  if (p.policy.intercept_dns) l.add("meta l4proto { tcp, udp } th dport 53 " + intercept);
  l.add("fib daddr type { broadcast, multicast } return");
  for (const auto& r : routes) {
    for (int family : {AF_INET, AF_INET6}) {
      std::string dst = daddr_match(r, family);
      if (dst.empty()) continue;
      l.add(dst + " " + tcp_match(r) + " " + intercept);
      l.add(dst + " " + other_match(r) + " " + reject_stmt());
    }
  }
  if (p.policy.mode == NetworkMode::isolated) l.add("drop");
  return "\tchain output {\n" + l.text + "\t}\n";
}

std::string postrouting_chain(const RulesetParams& p) {
  Lines l;
  l.add("type filter hook postrouting priority mangle; policy accept;");
  l.add("meta mark " + hex_mark(p.mark) + " oif != \"lo\" drop");
  return "\tchain postrouting {\n" + l.text + "\t}\n";
}

std::string forward_chain_isolated() {
  Lines l;
  l.add("type filter hook forward priority filter; policy drop;");
  l.add("meta l4proto tcp reject with tcp reset");
  l.add(reject_stmt());
  return "\tchain forward {\n" + l.text + "\t}\n";
}

std::vector<Prefix> normalise_prefixes(std::vector<Prefix> v) {
  std::sort(v.begin(), v.end(), [](const Prefix& a, const Prefix& b) {
    if (a.family != b.family) return a.family < b.family;
    if (a.addr != b.addr) return a.addr < b.addr;
    return a.length < b.length;
  });
  std::vector<Prefix> out;
  // Prefixes nest or are disjoint; in this order a contained one follows its container.
  for (const auto& p : v)
    if (out.empty() || !out.back().contains(p)) out.push_back(p);
  return out;
}

std::vector<PortRange> normalise_ports(std::vector<PortRange> v) {
  std::sort(v.begin(), v.end(), [](const PortRange& a, const PortRange& b) { return a.first < b.first; });
  std::vector<PortRange> out;
  for (const auto& r : v) {
    if (!out.empty() && static_cast<unsigned>(r.first) <= out.back().last + 1u)
      out.back().last = std::max(out.back().last, r.last);
    else
      out.push_back(r);
  }
  return out;
}

}  // namespace

CoveredRoute normalise_route(const CoveredRoute& route) {
  return CoveredRoute{normalise_prefixes(route.destinations), normalise_ports(route.ports)};
}

std::string build_ruleset(const RulesetParams& params) {
  std::vector<CoveredRoute> routes;
  if (params.policy.mode == NetworkMode::public_internet)
    for (const auto& r : params.policy.routes) routes.push_back(normalise_route(r));
  std::string t = build_table_removal();
  t += std::string("table inet ") + kTableName + " {\n";
  t += prerouting_chain(params, routes);
  t += output_chain(params, routes);
  t += postrouting_chain(params);
  if (params.policy.mode == NetworkMode::isolated) t += forward_chain_isolated();
  t += "}\n";
  return t;
}

std::string build_table_removal() {
  // Declaring the table first makes the delete succeed when it is absent.
  return std::string("table inet ") + kTableName + " {\n}\ndelete table inet " + kTableName + "\n";
}

}  // namespace kib::netns
