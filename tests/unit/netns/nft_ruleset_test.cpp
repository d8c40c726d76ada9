#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "netns/nft_ruleset.h"

using namespace kib::netns;

namespace {

Prefix P(const char* text) { return *Prefix::parse(text); }

RulesetParams params(RulesetPolicy policy, TproxyPorts ports = {40000, 40001, 40002}) {
  return RulesetParams{std::move(policy), ports, 0x6b696201};
}

RulesetPolicy public_policy(std::vector<CoveredRoute> routes, bool dns = false) {
  return RulesetPolicy{NetworkMode::public_internet, std::move(routes), dns};
}

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// The lines of one chain ("prerouting", "output", ...), without indentation.
std::vector<std::string> chain(const std::string& text, const std::string& name) {
  std::vector<std::string> out;
  size_t at = text.find("chain " + name + " {");
  if (at == std::string::npos) return out;
  size_t end = text.find("\n\t}", at);
  size_t line = text.find('\n', at) + 1;
  while (line < end) {
    size_t nl = text.find('\n', line);
    std::string l = text.substr(line, nl - line);
    out.push_back(l.substr(l.find_first_not_of('\t')));
    line = nl + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("the buffer replaces the table in one transaction: declare, delete, define") {
  std::string t = build_ruleset(params(public_policy({})));
  CHECK(t.rfind("table inet kibotos {\n}\ndelete table inet kibotos\ntable inet kibotos {\n", 0) == 0);
  CHECK(build_table_removal() == "table inet kibotos {\n}\ndelete table inet kibotos\n");
}

TEST_CASE("covered TCP is marked and sent to the TCP listener, v4 and v6 in separate sets") {
  auto t = build_ruleset(params(public_policy({{{P("10.0.0.0/8"), P("2001:db8::/32")}, {{443, 443}}}})));
  auto pre = chain(t, "prerouting");
  std::vector<std::string> want = {
      "type filter hook prerouting priority mangle; policy accept;",
      "iif \"lo\" meta mark != 0x6b696201 return",
      "ct direction reply return",
      "fib daddr type local tcp dport { 40000, 40002 } drop",
      "fib daddr type local udp dport 40001 drop",
      "tcp flags & (syn | ack) != syn socket transparent 1 meta mark set 0x6b696201 accept",
      "fib daddr type { local, broadcast, multicast } return",
      "ip daddr { 10.0.0.0/8 } tcp dport { 443 } meta mark set 0x6b696201 tproxy ip to :40000 accept",
      "ip daddr { 10.0.0.0/8 } tcp dport { 443 } drop",
      "ip daddr { 10.0.0.0/8 } meta l4proto { udp, udplite, sctp, dccp } th dport { 443 } reject with icmpx "
      "admin-prohibited",
      "ip6 daddr { 2001:db8::/32 } tcp dport { 443 } meta mark set 0x6b696201 tproxy ip6 to :40000 accept",
      "ip6 daddr { 2001:db8::/32 } tcp dport { 443 } drop",
      "ip6 daddr { 2001:db8::/32 } meta l4proto { udp, udplite, sctp, dccp } th dport { 443 } reject with icmpx "
      "admin-prohibited",
  };
  CHECK(pre == want);
}

TEST_CASE("traffic generated inside the namespace is marked so the fwmark rule loops it through lo") {
  auto t = build_ruleset(params(public_policy({{{P("10.0.0.0/8")}, {}}})));
  std::vector<std::string> want = {
      "type route hook output priority mangle; policy accept;",
      "oif \"lo\" return",
      "ct direction reply return",
      "ct mark 0x6b696201 meta mark set 0x6b696201 accept",
      "fib daddr type { broadcast, multicast } return",
      "ip daddr { 10.0.0.0/8 } meta l4proto tcp meta mark set 0x6b696201 ct mark set 0x6b696201 accept",
      "ip daddr { 10.0.0.0/8 } meta l4proto != tcp reject with icmpx admin-prohibited",
  };
  CHECK(chain(t, "output") == want);
}

TEST_CASE("an entry without ports covers all TCP and rejects every other protocol to its destinations") {
  auto t = build_ruleset(params(public_policy({{{P("0.0.0.0/0"), P("::/0")}, {}}})));
  CHECK(has(t, "ip daddr { 0.0.0.0/0 } meta l4proto tcp meta mark set 0x6b696201 tproxy ip to :40000 accept"));
  CHECK(has(t, "ip6 daddr { ::/0 } meta l4proto tcp meta mark set 0x6b696201 tproxy ip6 to :40000 accept"));
  CHECK(has(t, "ip daddr { 0.0.0.0/0 } meta l4proto != tcp reject with icmpx admin-prohibited"));
  CHECK(has(t, "ip6 daddr { ::/0 } meta l4proto != tcp reject with icmpx admin-prohibited"));
  CHECK_FALSE(has(t, "} tcp dport"));
  CHECK_FALSE(has(t, "th dport"));
}

TEST_CASE("fail closed: every tproxy rule is followed by a drop of the same traffic") {
  auto t = build_ruleset(params(public_policy({{{P("10.0.0.0/8"), P("fd00::/8")}, {{80, 80}}}}, true)));
  auto pre = chain(t, "prerouting");
  int tproxies = 0;
  for (size_t i = 0; i < pre.size(); ++i) {
    size_t at = pre[i].find(" meta mark set ");
    if (pre[i].find("tproxy") == std::string::npos) continue;
    ++tproxies;
    std::string match = pre[i].substr(0, at);
    bool dropped = false;
    for (size_t j = i + 1; j < pre.size(); ++j) {
      // DNS rules are per family (meta nfproto); their drop covers both families.
      std::string m = match.rfind("meta nfproto", 0) == 0 ? match.substr(match.find(' ', 13) + 1) : match;
      if (pre[j] == m + " drop") dropped = true;
    }
    CAPTURE(pre[i]);
    CHECK(dropped);
  }
  CHECK(tproxies == 6);  // tcp v4, v6; dns udp v4, v6; dns tcp v4, v6
}

TEST_CASE("while no listener exists yet (ports 0) covered traffic and DNS are only dropped") {
  auto t = build_ruleset(params(public_policy({{{P("10.0.0.0/8")}, {}}}, true), TproxyPorts{}));
  CHECK_FALSE(has(t, "tproxy"));
  CHECK_FALSE(has(t, "fib daddr type local tcp dport"));
  CHECK(has(t, "ip daddr { 10.0.0.0/8 } meta l4proto tcp drop"));
  CHECK(has(t, "udp dport 53 drop"));
  CHECK(has(t, "tcp dport 53 drop"));
}

TEST_CASE("with resolvers DNS to any address goes to the DNS listeners, before coverage") {
  auto t = build_ruleset(params(public_policy({{{P("0.0.0.0/0")}, {}}}, true)));
  auto pre = chain(t, "prerouting");
  std::vector<std::string> dns = {
      "meta nfproto ipv4 udp dport 53 meta mark set 0x6b696201 tproxy ip to :40001 accept",
      "meta nfproto ipv6 udp dport 53 meta mark set 0x6b696201 tproxy ip6 to :40001 accept",
      "udp dport 53 drop",
      "meta nfproto ipv4 tcp dport 53 meta mark set 0x6b696201 tproxy ip to :40002 accept",
      "meta nfproto ipv6 tcp dport 53 meta mark set 0x6b696201 tproxy ip6 to :40002 accept",
      "tcp dport 53 drop",
  };
  const size_t at = 6;  // after the lo, reply, listener-guard and socket rules
  REQUIRE(pre.size() > at + dns.size());
  CHECK(std::vector<std::string>(pre.begin() + at, pre.begin() + at + dns.size()) == dns);
  CHECK(has(t, "meta l4proto { tcp, udp } th dport 53 meta mark set 0x6b696201 ct mark set 0x6b696201 accept"));
}

TEST_CASE("without resolvers DNS is not intercepted") {
  auto t = build_ruleset(params(public_policy({{{P("10.0.0.0/8")}, {}}}, false)));
  CHECK_FALSE(has(t, "dport 53 "));
}

TEST_CASE("entries keep policy order") {
  auto t = build_ruleset(params(public_policy({{{P("192.168.0.0/16")}, {{22, 22}}}, {{P("10.0.0.0/8")}, {}}})));
  auto first = t.find("ip daddr { 192.168.0.0/16 } tcp dport { 22 } meta mark");
  auto second = t.find("ip daddr { 10.0.0.0/8 } meta l4proto tcp meta mark");
  REQUIRE(first != std::string::npos);
  REQUIRE(second != std::string::npos);
  CHECK(first < second);
}

TEST_CASE("contained and duplicate prefixes collapse, port ranges merge") {
  CoveredRoute r{
      {P("10.1.0.0/16"), P("10.0.0.0/8"), P("10.0.0.0/8"), P("192.0.2.0/24"), P("fd00::/8"), P("fd00:1::/32")},
      {{443, 443}, {80, 90}, {85, 100}, {101, 101}, {8080, 8080}}};
  auto n = normalise_route(r);
  std::vector<std::string> prefixes;
  for (const auto& p : n.destinations) prefixes.push_back(p.to_string());
  CHECK(prefixes == std::vector<std::string>{"10.0.0.0/8", "192.0.2.0/24", "fd00::/8"});
  auto t = build_ruleset(params(public_policy({r})));
  CHECK(has(t, "ip daddr { 10.0.0.0/8, 192.0.2.0/24 } tcp dport { 80-101, 443, 8080 } meta mark"));
  CHECK(has(t, "ip6 daddr { fd00::/8 } tcp dport { 80-101, 443, 8080 } meta mark"));
}

TEST_CASE("a route with only IPv4 destinations adds no IPv6 rules") {
  auto t = build_ruleset(params(public_policy({{{P("10.0.0.0/8")}, {}}})));
  CHECK_FALSE(has(t, "ip6 daddr"));
}

TEST_CASE("isolated: nothing is forwarded, local traffic only to lo or as a reply, routes ignored") {
  RulesetPolicy iso{NetworkMode::isolated, {{{P("0.0.0.0/0")}, {}}}, false};
  auto t = build_ruleset(params(iso));
  std::vector<std::string> fwd = {
      "type filter hook forward priority filter; policy drop;",
      "meta l4proto tcp reject with tcp reset",
      "reject with icmpx admin-prohibited",
  };
  CHECK(chain(t, "forward") == fwd);
  auto out = chain(t, "output");
  REQUIRE_FALSE(out.empty());
  CHECK(out.back() == "drop");
  CHECK_FALSE(has(t, "ip daddr"));
  CHECK_FALSE(has(t, "tproxy ip to :40000"));
}

TEST_CASE("isolated with resolvers still intercepts DNS") {
  RulesetPolicy iso{NetworkMode::isolated, {}, true};
  auto t = build_ruleset(params(iso));
  CHECK(has(t, "tproxy ip to :40001"));
  CHECK(has(t, "meta l4proto { tcp, udp } th dport 53 meta mark set 0x6b696201 ct mark set 0x6b696201 accept"));
}

TEST_CASE("connections already intercepted stay with the agent across updates") {
  auto t = build_ruleset(params(public_policy({})));
  CHECK(chain(t, "prerouting")[5] ==
        "tcp flags & (syn | ack) != syn socket transparent 1 meta mark set 0x6b696201 accept");
  CHECK(chain(t, "output")[3] == "ct mark 0x6b696201 meta mark set 0x6b696201 accept");
}

TEST_CASE("public internet forwards freely: no forward chain") {
  CHECK(chain(build_ruleset(params(public_policy({}))), "forward").empty());
}

TEST_CASE("marked packets never leave on a real interface") {
  auto t = build_ruleset(params(public_policy({})));
  CHECK(chain(t, "postrouting") == std::vector<std::string>{
                                       "type filter hook postrouting priority mangle; policy accept;",
                                       "meta mark 0x6b696201 oif != \"lo\" drop",
                                   });
}
