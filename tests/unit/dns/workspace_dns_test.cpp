// WorkspaceDns on a real ring, unprivileged: ordinary loopback guest listeners stand
// in for the TPROXY ones (a UDP one with IP_RECVORIGDSTADDR, as the attacher sets it),
// the reply "socket for the address the guest asked" is the listener's own (no
// IP_TRANSPARENT needed: it is bound there), resolvers are in-process (UDP
// responder, DNS over TCP, the SOCKS5 server in front of one). What needs root stays
// in the integration tests: interception in a namespace, transparent reply sockets
// for addresses the host does not own, UDP ASSOCIATE through a real SOCKS5 server.
#include <doctest/doctest.h>
#include <netinet/in.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "agent/dns/workspace_dns.h"
#include "tests/unit/policy/dns_responder.h"
#include "tests/unit/support/loop_harness.h"
#include "tests/unit/support/socks5_test_server.h"

using kib::dns::Bytes;
using kib::dns::ResolverRoute;
using kib::dns::SocketAddress;
using kib::dns::StreamContext;
using kib::dns::WorkspaceDns;
using kib::dns::WorkspaceDnsOptions;
using kib::test::Socks5Script;
using kib::test::Socks5TestServer;
using kib::test::TestLoop;

namespace {

// A DNS query for `name` A with the given ID.
std::string query(uint16_t id, const std::string& name = "example.test") {
  std::string q = {static_cast<char>(id >> 8), static_cast<char>(id & 0xff), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<char>(dot - start));
    q.append(name, start, dot - start);
    start = dot + 1;
  }
  q.append({0, 0, 1, 0, 1});
  return q;
}
uint16_t id_of(const std::string& m) {
  return static_cast<uint16_t>(static_cast<uint8_t>(m[0]) << 8 | static_cast<uint8_t>(m[1]));
}

SocketAddress address_of(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&a));
}
SocketAddress loopback(uint16_t port) {
  return SocketAddress::from(kib::policy::IpAddress::parse("127.0.0.1").value(), port);
}
kib::UniqueFd loopback_socket(int type) {
  kib::UniqueFd fd(::socket(AF_INET, type | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

struct World {
  TestLoop loop;
  kib::policy::EndpointAddressPolicy policy{{kib::policy::Cidr::parse("127.0.0.0/8").value()}};
  size_t live = 0;
  StreamContext ctx{*loop, policy,
                    [](const std::string&, kib::dns::ResolveCallback cb) {
    cb(kib::Error{kib::Code::unavailable, "no resolving in this test"});
                    },
                    3000, &live};
  std::map<std::string, kib::relay::DialTargetPtr> egresses;
  // The guest listeners; the reply socket for their address is a descriptor of the UDP one.
  kib::UniqueFd udp_listener = loopback_socket(SOCK_DGRAM);
  kib::UniqueFd tcp_listener = loopback_socket(SOCK_STREAM);
  SocketAddress udp_addr = address_of(udp_listener.get());
  SocketAddress tcp_addr = address_of(tcp_listener.get());
  std::vector<std::string> opened;  // addresses reply sockets were asked for
  std::unique_ptr<WorkspaceDns> dns;

  explicit World(std::vector<ResolverRoute> resolvers, WorkspaceDnsOptions options = {}) {
    int one = 1;
    REQUIRE(setsockopt(udp_listener.get(), SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof one) == 0);
    REQUIRE(::listen(tcp_listener.get(), 16) == 0);
    const int udp_fd = udp_listener.get();
    dns = std::make_unique<WorkspaceDns>(
        ctx, [this](const std::string& id) { return egresses.count(id) ? egresses[id] : nullptr; },
        [this, udp_fd](const SocketAddress& asked) -> kib::Result<kib::UniqueFd> {
          opened.push_back(asked.to_string());
          return kib::UniqueFd(::fcntl(udp_fd, F_DUPFD_CLOEXEC, 0));
        },
        options, 1, std::move(resolvers));
    dns->add_udp_listener(kib::UniqueFd(::fcntl(udp_listener.get(), F_DUPFD_CLOEXEC, 0)));
    dns->add_tcp_listener(kib::UniqueFd(::fcntl(tcp_listener.get(), F_DUPFD_CLOEXEC, 0)));
  }
  ~World() {
    dns.reset();
    CHECK(loop.drive([&] { return live == 0; }));
  }

  // A UDP guest: asks, then waits (bounded) for one answer.
  std::string ask_udp(const std::string& q, int cap_ms = 5000, std::function<void()> meanwhile = {}) {
    kib::UniqueFd g = loopback_socket(SOCK_DGRAM);
    REQUIRE(::sendto(g.get(), q.data(), q.size(), 0, &udp_addr.sa, udp_addr.length()) ==
            static_cast<ssize_t>(q.size()));
    if (meanwhile) meanwhile();
    std::string answer;
    loop.drive(
        [&] {
      char buf[1500];
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      ssize_t n = ::recvfrom(g.get(), buf, sizeof buf, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len);
      if (n <= 0) return false;
      // From the address the guest asked.
      CHECK(SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&from)).to_string() == udp_addr.to_string());
      answer.assign(buf, static_cast<size_t>(n));
      return true;
        },
        cap_ms);
    return answer;
  }
  // A TCP guest: one framed query, one framed answer.
  std::string ask_tcp(const std::string& q) {
    sockaddr_in a = tcp_addr.v4;
    kib::test::Guest g(a);
    std::string framed = {static_cast<char>(q.size() >> 8), static_cast<char>(q.size() & 0xff)};
    g.send(framed + q);
    auto complete = [&] {
      if (g.in.size() < 2) return false;
      const size_t n = static_cast<size_t>(static_cast<uint8_t>(g.in[0]) << 8 | static_cast<uint8_t>(g.in[1]));
      return g.in.size() >= 2 + n;
    };
    REQUIRE(loop.drive(complete, [&] { g.pump(); }));
    return g.in.substr(2);
  }
  kib::dns::WorkspaceDnsStatus status() const { return dns->status(); }
};

}  // namespace

TEST_CASE("workspace dns: a UDP guest query, a UDP resolver, the answer from the asked address") {
  kib::policy::testing::DnsResponder resolver("example.test", {"192.0.2.7"});
  const auto port = static_cast<uint16_t>(std::stoi(resolver.server().substr(resolver.server().rfind(':') + 1)));
  World w({ResolverRoute{.tcp = false, .address = loopback(port), .egress_id = ""}});
  const std::string a = w.ask_udp(query(0x2222));
  REQUIRE(a.size() > 12);
  CHECK(id_of(a) == 0x2222);
  CHECK((static_cast<uint8_t>(a[2]) & 0x80) != 0);                         // QR
  CHECK(a.find(std::string("\xc0\x00\x02\x07", 4)) != std::string::npos);  // 192.0.2.7
  CHECK(w.opened == std::vector<std::string>{w.udp_addr.to_string()});
  const auto s = w.status();
  CHECK(s.counters.queries == 1);
  CHECK(s.counters.answers == 1);
  CHECK(s.in_flight == 0);
}

TEST_CASE("workspace dns: a TCP guest, a TCP resolver straight from the host") {
  Socks5Script script;
  script.handshake = Socks5Script::Handshake::none;
  script.then = Socks5Script::Then::dns;
  Socks5TestServer resolver(script);
  World w({ResolverRoute{.tcp = true, .address = loopback(resolver.port()), .egress_id = ""}});
  const std::string a = w.ask_tcp(query(0x3333));
  REQUIRE(a.size() >= 12);
  CHECK(id_of(a) == 0x3333);
  CHECK(w.status().counters.answers == 1);
  // The UDP guest's query goes over the same kind of channel.
  const std::string b = w.ask_udp(query(0x4444));
  REQUIRE(b.size() >= 12);
  CHECK(id_of(b) == 0x4444);
  CHECK(w.status().counters.answers == 2);
}

TEST_CASE("workspace dns: a TCP resolver through an Egress (SOCKS5 CONNECT to the resolver)") {
  Socks5Script script;
  script.then = Socks5Script::Then::dns;
  Socks5TestServer socks(script);
  World w({ResolverRoute{.tcp = true, .address = loopback(5353), .egress_id = "eg"}});
  auto t = std::make_shared<kib::relay::DialTarget>();
  auto rev = std::make_shared<kib::EgressRevision>();
  rev->egress_id = "eg";
  rev->revision = 3;
  t->revision = rev;
  t->endpoint = {"127.0.0.1", socks.port(), kib::policy::IpAddress::parse("127.0.0.1").value()};
  w.egresses["eg"] = t;
  const std::string a = w.ask_udp(query(0x5555));
  REQUIRE(a.size() >= 12);
  CHECK(id_of(a) == 0x5555);
  CHECK(socks.seen().last_destination == "127.0.0.1:5353");
  const auto s = w.status();
  REQUIRE(s.resolvers.size() == 1);
  CHECK(s.resolvers[0].egress_id == "eg");
  CHECK(s.resolvers[0].egress_held == 3);
}

TEST_CASE("workspace dns: a UDP resolver through an Egress (SOCKS5 UDP ASSOCIATE)") {
  kib::policy::testing::DnsResponder resolver("example.test", {"192.0.2.8"});
  const auto port = static_cast<uint16_t>(std::stoi(resolver.server().substr(resolver.server().rfind(':') + 1)));
  Socks5TestServer socks(Socks5Script{});
  World w({ResolverRoute{.tcp = false, .address = loopback(port), .egress_id = "eg"}});
  auto t = std::make_shared<kib::relay::DialTarget>();
  auto rev = std::make_shared<kib::EgressRevision>();
  rev->egress_id = "eg";
  rev->revision = 1;
  t->revision = rev;
  t->endpoint = {"127.0.0.1", socks.port(), kib::policy::IpAddress::parse("127.0.0.1").value()};
  w.egresses["eg"] = t;
  const std::string a = w.ask_udp(query(0x7777));
  REQUIRE(a.size() > 12);
  CHECK(id_of(a) == 0x7777);
  CHECK(a.find(std::string("\xc0\x00\x02\x08", 4)) != std::string::npos);  // 192.0.2.8
  CHECK(socks.seen().udp_datagrams == 1);
  CHECK(resolver.queries() == 1);
  const auto s = w.status();
  REQUIRE(s.resolvers.size() == 1);
  CHECK(s.resolvers[0].state == "associated");
  CHECK(s.resolvers[0].relay_address.rfind("127.0.0.1:", 0) == 0);
}

TEST_CASE("workspace dns: a malformed query is counted, not forwarded") {
  kib::policy::testing::DnsResponder resolver("example.test", {"192.0.2.7"});
  const auto port = static_cast<uint16_t>(std::stoi(resolver.server().substr(resolver.server().rfind(':') + 1)));
  World w({ResolverRoute{.tcp = false, .address = loopback(port), .egress_id = ""}});
  kib::UniqueFd g = loopback_socket(SOCK_DGRAM);
  const std::string junk = "not dns";
  REQUIRE(::sendto(g.get(), junk.data(), junk.size(), 0, &w.udp_addr.sa, w.udp_addr.length()) == 7);
  REQUIRE(w.loop.drive([&] { return w.status().counters.failed(kib::dns::FailureReason::malformed_query) == 1; }));
  CHECK(w.status().counters.queries == 0);
  CHECK(resolver.queries() == 0);
}

TEST_CASE("workspace dns: a resolver that never answers times out (stepped clock) and the query fails over") {
  kib::UniqueFd silent = loopback_socket(SOCK_DGRAM);  // bound, never read: no answer, no ICMP
  kib::policy::testing::DnsResponder resolver("example.test", {"192.0.2.9"});
  const auto port = static_cast<uint16_t>(std::stoi(resolver.server().substr(resolver.server().rfind(':') + 1)));
  WorkspaceDnsOptions o;
  o.attempt_timeout = std::chrono::milliseconds(2000);
  World w({ResolverRoute{.tcp = false, .address = address_of(silent.get()), .egress_id = ""},
           ResolverRoute{.tcp = false, .address = loopback(port), .egress_id = ""}},
          o);
  const std::string a = w.ask_udp(query(0x6666), 5000, [&] {
    REQUIRE(w.loop.drive([&] { return w.status().in_flight == 1; }));
    w.loop.settle(20);
    CHECK(resolver.queries() == 0);  // the first resolver has it
    w.loop.step(1900);
    w.loop.settle(20);
    CHECK(w.status().counters.timeouts == 0);
    w.loop.step(200);  // past the attempt timeout: the second resolver is asked
  });
  REQUIRE(a.size() > 12);
  CHECK(id_of(a) == 0x6666);
  const auto s = w.status();
  CHECK(s.counters.timeouts == 1);
  CHECK(s.counters.failovers == 1);
  CHECK(s.counters.answers == 1);
}
