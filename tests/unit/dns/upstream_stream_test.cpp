// UpstreamStream on a real ring, unprivileged: DNS over TCP straight to an in-process
// resolver, or through the in-process SOCKS5 server (plain, auth, TLS) that plays the
// resolver behind it; failed dials (refused reply, no listener, handshake timeout by
// a stepped clock). Every stream is released (live_objects back to 0), no fd leaks.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "agent/dns/upstream_stream.h"
#include "tests/unit/relay/tls_test_server.h"
#include "tests/unit/support/loop_harness.h"
#include "tests/unit/support/socks5_test_server.h"

using kib::dns::Bytes;
using kib::dns::ByteView;
using kib::dns::SocketAddress;
using kib::dns::StreamContext;
using kib::dns::StreamEvents;
using kib::dns::StreamRoute;
using kib::dns::UpstreamStream;
using kib::test::Socks5Script;
using kib::test::Socks5Seen;
using kib::test::Socks5TestServer;
using kib::test::TestLoop;
using Then = Socks5Script::Then;
using Handshake = Socks5Script::Handshake;

namespace {

const kib::test::Cert& cert() { return kib::test::socks_server_cert(); }

struct Events final : StreamEvents {
  int ready = 0;
  std::optional<SocketAddress> relay;
  Bytes data;
  std::optional<std::string> closed;
  void on_stream_ready(const std::optional<SocketAddress>& r) override {
    ++ready;
    relay = r;
  }
  void on_stream_data(ByteView d) override { data.insert(data.end(), d.begin(), d.end()); }
  void on_stream_closed(const std::string& reason) override { closed = reason; }
};

// A framed DNS query for example.test A with the given ID.
Bytes framed_query(uint16_t id) {
  Bytes q = {static_cast<uint8_t>(id >> 8),
             static_cast<uint8_t>(id),
             0x01,
             0x00,
             0,
             1,
             0,
             0,
             0,
             0,
             0,
             0,
             7,
             'e',
             'x',
             'a',
             'm',
             'p',
             'l',
             'e',
             4,
             't',
             'e',
             's',
             't',
             0,
             0,
             1,
             0,
             1};
  Bytes f = {static_cast<uint8_t>(q.size() >> 8), static_cast<uint8_t>(q.size())};
  f.insert(f.end(), q.begin(), q.end());
  return f;
}

SocketAddress loopback(uint16_t port) {
  return SocketAddress::from(kib::policy::IpAddress::parse("127.0.0.1").value(), port);
}

// A loopback port nobody listens on (bound, never listening: connect is refused).
struct DeadPort {
  kib::UniqueFd fd{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  uint16_t port = 0;
  DeadPort() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
};

struct World {
  TestLoop loop;
  kib::policy::EndpointAddressPolicy policy{{kib::policy::Cidr::parse("127.0.0.0/8").value()}};
  size_t live = 0;
  int resolves = 0;
  StreamContext ctx{*loop, policy,
                    [this](const std::string& host, kib::dns::ResolveCallback cb) {
    ++resolves;
    CHECK(host == "socks.test");
    loop.loop->post([cb = std::move(cb)] { cb(std::vector{kib::policy::IpAddress::parse("127.0.0.1").value()}); });
                    },
                    3000, &live};
  Socks5TestServer server;
  Events ev;
  UpstreamStream* stream = nullptr;

  explicit World(Socks5Script s) : server(std::move(s)) {}
  template <typename P>
  bool server_until(P pred) {
    return loop.drive([&] { return pred(server.seen()); });
  }

  std::shared_ptr<kib::relay::DialTarget> egress(bool tls = false) {
    auto t = std::make_shared<kib::relay::DialTarget>();
    auto rev = std::make_shared<kib::EgressRevision>();
    rev->egress_id = "eg-dns";
    rev->revision = 1;
    t->revision = rev;
    if (tls) {
      t->endpoint = {"socks.test", server.port(), std::nullopt};
      t->tls = kib::relay::TlsClientContext::create("socks.test", cert().pem).value();
    } else {
      t->endpoint = {"127.0.0.1", server.port(), kib::policy::IpAddress::parse("127.0.0.1").value()};
    }
    return t;
  }
  void start(StreamRoute route) {
    stream = UpstreamStream::create(ctx, ev, std::move(route));
    stream->start();
  }
  // One query, its answer: same ID, QR set.
  void query_and_answer(uint16_t id) {
    REQUIRE(loop.drive([&] { return ev.ready == 1 || ev.closed; }));
    REQUIRE_FALSE(ev.closed);
    const size_t before = ev.data.size();
    const Bytes q = framed_query(id);
    stream->write(ByteView(q));
    REQUIRE(loop.drive([&] { return ev.data.size() >= before + q.size() || ev.closed; }));
    REQUIRE_FALSE(ev.closed);
    Bytes a(ev.data.begin() + static_cast<std::ptrdiff_t>(before), ev.data.end());
    REQUIRE(a.size() == q.size());
    CHECK(a[2] == (id >> 8));
    CHECK(a[3] == (id & 0xff));
    CHECK((a[4] & 0x80) != 0);  // QR
  }
  void close_and_release() {
    stream->close();
    REQUIRE(loop.drive([&] { return live == 0; }));
  }
};

Socks5Script dns_behind(Handshake h = Handshake::answer) {
  Socks5Script s;
  s.handshake = h;
  s.then = Then::dns;
  return s;
}

}  // namespace

TEST_CASE("upstream stream: DNS over TCP, straight and through SOCKS5, and failed dials") {
  (void)cert();
  struct Case {
    const char* name;
    void (*body)();
  };
  const Case cases[] =
      {
          {"straight to a TCP resolver: queries and answers, no SOCKS5",
           [] {
    World w(dns_behind(Handshake::none));
    w.start(StreamRoute{.resolver = loopback(w.server.port()), .egress = nullptr});
    w.query_and_answer(0x1234);
    w.query_and_answer(0x4321);
    CHECK(w.server.seen().dns_queries == 2);
    w.close_and_release();
    CHECK_FALSE(w.ev.closed);  // close() reports nothing
           }},
          {"through SOCKS5: CONNECT names the resolver, then DNS inside the tunnel",
           [] {
    World w(dns_behind());
    w.start(StreamRoute{.resolver = loopback(5353), .egress = w.egress()});
    w.query_and_answer(7);
    CHECK(w.server.seen().last_destination == "127.0.0.1:5353");
    CHECK(w.server.seen().last_methods == std::vector<uint8_t>{0});
    w.close_and_release();
           }},
             {"through SOCKS5 with user/pass",
              [] {
    Socks5Script s = dns_behind();
    s.require_auth = true;
    s.username = "dns";
    s.password = "pw";
    World w(s);
    auto t = w.egress();
    t->credentials = {"dns", "pw"};
    w.start(StreamRoute{.resolver = loopback(5353), .egress = t});
    w.query_and_answer(8);
    w.close_and_release();
              }},
      {"through SOCKS5 inside TLS, the endpoint a name resolved on the loop",
       [] {
    Socks5Script s = dns_behind();
    s.tls = &cert();
    World w(s);
    w.start(StreamRoute{.resolver = loopback(5353), .egress = w.egress(true)});
    w.query_and_answer(9);
    CHECK(w.resolves == 1);
    CHECK(w.server.seen().tls_full == 1);
    w.close_and_release();
       }},
      {"UDP ASSOCIATE: ready with the relay address the server named (checked), the stream stays open",
       [] {
    World w(dns_behind());
    w.start(StreamRoute{.resolver = loopback(5353), .egress = w.egress(), .udp_associate = true});
    REQUIRE(w.loop.drive([&] { return w.ev.ready == 1 || w.ev.closed; }));
    REQUIRE_FALSE(w.ev.closed);
    REQUIRE(w.ev.relay);
    CHECK(w.ev.relay->ip().to_string() == "127.0.0.1");
    CHECK(w.ev.relay->port() != 0);
    CHECK(w.server.seen().last_destination == "0.0.0.0:0");  // RFC 1928: zeros when unknown
    w.close_and_release();
       }},
      {"the SOCKS5 server refuses the CONNECT: closed with its reason",
       [] {
    Socks5Script s = dns_behind();
    s.reply = 5;
    World w(s);
    w.start(StreamRoute{.resolver = loopback(5353), .egress = w.egress()});
    REQUIRE(w.loop.drive([&] { return w.ev.closed.has_value(); }));
    CHECK(*w.ev.closed == "socks5: connection_refused");
    CHECK(w.ev.ready == 0);
    REQUIRE(w.loop.drive([&] { return w.live == 0; }));
       }},
      {"nothing listens at the Egress: connect refused",
       [] {
    World w(dns_behind());
    DeadPort dead;
    auto t = w.egress();
    t->endpoint.port = dead.port;
    w.start(StreamRoute{.resolver = loopback(5353), .egress = t});
    REQUIRE(w.loop.drive([&] { return w.ev.closed.has_value(); }));
    CHECK(w.ev.closed->find("Connection refused") != std::string::npos);
    REQUIRE(w.loop.drive([&] { return w.live == 0; }));
       }},
      {"the SOCKS5 server never answers: handshake timeout on the stepped clock",
       [] {
    World w(dns_behind(Handshake::stall));
    w.start(StreamRoute{.resolver = loopback(5353), .egress = w.egress()});
    REQUIRE(w.server_until([](const Socks5Seen& s) { return !s.last_methods.empty(); }));
    w.loop.step(w.ctx.handshake_ms - 200);
    w.loop.settle(10);
    CHECK_FALSE(w.ev.closed);
    w.loop.step(400);
    REQUIRE(w.loop.drive([&] { return w.ev.closed.has_value(); }));
    CHECK(*w.ev.closed == "handshake timed out");
    REQUIRE(w.loop.drive([&] { return w.live == 0; }));
       }},
      {"the resolver closes the stream: closed by the peer",
       [] {
    Socks5Script s = dns_behind(Handshake::none);
    s.then = Then::send_and_shut;
    s.greeting_bytes = "";
    World w(s);
    w.start(StreamRoute{.resolver = loopback(w.server.port()), .egress = nullptr});
    REQUIRE(w.loop.drive([&] { return w.ev.closed.has_value(); }));
    CHECK(*w.ev.closed == "closed by the peer");
    REQUIRE(w.loop.drive([&] { return w.live == 0; }));
       }},
      };
  for (const Case& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const int fds_before = kib::test::count_fds();
    c.body();
    CHECK(kib::test::count_fds() == fds_before);
  }
}
