// RelayConnection on a real ring, unprivileged: a loopback guest (an ordinary
// listener's accepted socket stands in for the TPROXY one), an in-process SOCKS5
// server (plain or TLS) that also plays the destination, and a clock the test steps
// for the idle, drain and handshake timers. Only the public interface is used: the
// constructor, start, drain_until, abort, the observer's callbacks and what the
// sockets see. Every case runs with and without direct-descriptor slots, and checks
// that the connection is released exactly once and leaks no descriptor.
#include <doctest/doctest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "agent/relay/relay_connection.h"
#include "tests/unit/relay/tls_test_server.h"
#include "tests/unit/support/dead_port.h"
#include "tests/unit/support/loop_harness.h"
#include "tests/unit/support/socks5_test_server.h"

using kib::relay::ConnectionObserver;
using kib::relay::DialTarget;
using kib::relay::RelayConnection;
using kib::relay::RelayTimeouts;
using kib::relay::SocketAddress;
using kib::test::Guest;
using kib::test::GuestListener;
using kib::test::Socks5Script;
using kib::test::Socks5Seen;
using kib::test::Socks5TestServer;
using kib::test::TestLoop;
using Then = Socks5Script::Then;
using Handshake = Socks5Script::Handshake;

namespace {

const kib::test::Cert& cert() { return kib::test::socks_server_cert(); }

struct Observer final : ConnectionObserver {
  explicit Observer(kib::uring::Loop& l) : loop(l) {}
  kib::uring::Loop& loop;
  kib::policy::EndpointAddressPolicy policy{{kib::policy::Cidr::parse("127.0.0.0/8").value()}};
  int resolves = 0, established = 0, failed = 0, closed = 0, released = 0, out_of_resources = 0;
  std::string reason;
  kib::relay::DialCause cause = kib::relay::DialCause::local;
  bool refused = false;
  std::vector<kib::relay::CloseReason> close_reasons;

  void resolve(RelayConnection& c, const std::string& host) override {
    ++resolves;
    CHECK(host == "socks.test");
    loop.post([&c] { c.on_resolved(std::vector{kib::policy::IpAddress::parse("127.0.0.1").value()}); });
  }
  const kib::policy::EndpointAddressPolicy& address_policy() override { return policy; }
  std::set<RelayConnection*> relaying;
  int abandoned = 0;  // the guest went away while its dial was under way
  void on_established(RelayConnection& c) override {
    ++established;
    relaying.insert(&c);
  }
  void on_dial_failed(RelayConnection&, kib::relay::DialCause c, const std::string& r) override {
    ++failed;
    reason = r;
    cause = c;
    refused = c == kib::relay::DialCause::refused;
  }
  void on_out_of_resources(int) override { ++out_of_resources; }
  void on_closed(RelayConnection& c) override {
    ++closed;
    CHECK(c.closing());
    close_reasons.push_back(c.close_reason());
    if (c.close_reason() == kib::relay::CloseReason::guest_reset && relaying.erase(&c) == 0) ++abandoned;
    relaying.erase(&c);
  }
  void on_released(RelayConnection& c) override {
    ++released;
    delete &c;
  }
  std::vector<kib::relay::MovedRelay> moved;
  int move_failures = 0;
  void on_moved(RelayConnection&, kib::relay::MovedRelay m) override {
    if (m.guest)
      moved.push_back(std::move(m));
    else
      ++move_failures;
  }
};

// One test's world: loop, server, target, guest listener, observer.
struct World {
  TestLoop loop;
  Observer obs{*loop};
  RelayTimeouts timeouts{.connect_ms = 2000, .handshake_ms = 3000, .idle_ms = 60000};
  Socks5TestServer server;
  std::shared_ptr<DialTarget> target = std::make_shared<DialTarget>();
  GuestListener listener;

  World(uint32_t slots, Socks5Script script, bool tls = false, uint32_t buffers_posted = 32)
      : loop(slots, buffers_posted), server(std::move(script)) {
    auto rev = std::make_shared<kib::EgressRevision>();
    rev->egress_id = "eg-test";
    rev->revision = 1;
    target->revision = rev;
    if (tls) {
      // A name to resolve (the observer answers on the loop) and verify.
      target->endpoint = {"socks.test", server.port(), std::nullopt};
      target->tls = kib::relay::TlsClientContext::create("socks.test", cert().pem).value();
    } else {
      target->endpoint = {"127.0.0.1", server.port(), kib::policy::IpAddress::parse("127.0.0.1").value()};
    }
  }

  // A guest connects; its accepted socket goes to a new RelayConnection.
  std::unique_ptr<Guest> connect(RelayConnection** out = nullptr) {
    auto g = std::make_unique<Guest>(listener.addr);
    int fd = ::accept4(listener.fd.get(), nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(fd >= 0);
    auto* c = new RelayConnection(*loop, obs, timeouts, kib::UniqueFd(fd), target);
    if (out != nullptr) *out = c;
    c->start(c->original_dst());
    return g;
  }
  template <typename P>
  bool drive(Guest& g, P pred, int cap_ms = 5000) {
    return loop.drive(
        pred, [&] { g.pump(); }, cap_ms);
  }
  // The server is another thread; the loop keeps running meanwhile (its SQEs, e.g. a
  // slot's close, go out only when it runs).
  template <typename P>
  bool server_until(P pred) {
    return loop.drive([&] { return pred(server.seen()); });
  }
  std::string guest_dst() const { return "127.0.0.1:" + std::to_string(listener.port()); }
};

// The guest closes with an RST (SO_LINGER 0).
void reset_guest(Guest& g) {
  linger l{1, 0};
  setsockopt(g.fd.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  g.fd.reset();
}

// A guest sends n bytes of the server's pattern with its FIN after them and reads
// until the end; checks that the same n bytes came back. The pipes open before and,
// at most, meanwhile (a splice pipe shows there).
struct Sent {
  std::unique_ptr<Guest> guest;
  int pipes_before = 0;
  int max_pipes = 0;
};
Sent send_pattern(World& w, size_t n) {
  std::string data(n, '\0');
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(Socks5TestServer::pattern(i));
  Sent out;
  out.pipes_before = out.max_pipes = kib::test::count_pipes();  // stdout may be one
  out.guest = w.connect();
  Guest& g = *out.guest;
  g.send(data, true);
  int rounds = 0;
  REQUIRE(w.drive(
      g,
      [&] {
    if (++rounds % 8 == 0) out.max_pipes = std::max(out.max_pipes, kib::test::count_pipes());
    return g.eof || g.error != 0;
      },
      8000));
  CHECK(g.error == 0);
  CHECK(g.in.size() == n);
  CHECK((g.in == data));
  return out;
}

struct Case {
  const char* name;
  Socks5Script script;
  std::function<void(World&)> body;
  bool tls = false;
  uint32_t buffers_posted = 32;
};

// n guests at once, each sending its own bytes (`size` of them) and shutting; each
// gets exactly its bytes back.
void many_echoes(World& w, int n, size_t size) {
  std::vector<std::unique_ptr<Guest>> guests;
  for (int i = 0; i < n; ++i) {
    guests.push_back(w.connect());
    std::string data(size, '\0');
    for (size_t j = 0; j < size; ++j) data[j] = static_cast<char>('a' + (i + j) % 26);
    guests.back()->send(data, true);
  }
  REQUIRE(w.loop.drive(
      [&] {
    for (auto& g : guests)
      if (!g->eof && g->error == 0) return false;
    return true;
      },
      [&] {
    for (auto& g : guests) g->pump();
  },
          8000));
  for (auto& g : guests) {
    CHECK(g->error == 0);
    CHECK(g->in == g->out);
  }
  REQUIRE(w.loop.drive([&] { return w.obs.released == n; }));
  CHECK(w.obs.established == n);
}

// Take-over within one loop: moves c out (its sockets and unsent bytes, as another
// process would receive them) and resumes it in a new RelayConnection.
RelayConnection* move_and_resume(World& w, Guest& g, RelayConnection* c) {
  const size_t moved_before = w.obs.moved.size();
  const int released_before = w.obs.released;
  REQUIRE(c->movable());
  c->move_out();
  REQUIRE(w.drive(g, [&] { return w.obs.moved.size() > moved_before || w.obs.move_failures > 0; }));
  REQUIRE(w.obs.move_failures == 0);
  REQUIRE(w.drive(g, [&] { return w.obs.released == released_before + 1; }));  // the old one is gone
  kib::relay::MovedRelay m = std::move(w.obs.moved.back());
  CHECK(m.egress_id == "eg-test");
  CHECK(m.revision == 1);
  REQUIRE(m.up.valid());
  auto guest = std::move(m.guest);
  auto* next = new RelayConnection(*w.loop, w.obs, w.timeouts, std::move(guest), w.target);
  next->resume(std::move(m));
  return next;
}

Socks5Script script(Then then) {
  Socks5Script s;
  s.then = then;
  return s;
}

// A server that reads the greeting and never answers.
Socks5Script stalled() {
  Socks5Script s = script(Then::echo);
  s.handshake = Handshake::stall;
  return s;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all =
      {
          {"no auth: greeting offers method 0, CONNECT names the original destination, bytes both ways",
           script(Then::echo),
           [](World& w) {
    auto g = w.connect();
    g->send("ping", /*then_shut=*/true);
    REQUIRE(w.drive(*g, [&] { return g->eof || g->error != 0; }));
    CHECK(g->in == "ping");
    CHECK(g->error == 0);
    CHECK(w.obs.established == 1);
    Socks5Seen s = w.server.seen();
    CHECK(s.last_methods == std::vector<uint8_t>{0});
    CHECK(s.last_destination == w.guest_dst());
    CHECK(s.peer_eof);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1; }));
           }},
          {"user/pass: greeting offers only method 2, the server checks the credentials",
           [] {
    Socks5Script s = script(Then::echo);
    s.require_auth = true;
    s.username = "alice";
    s.password = "s3cret";
    return s;
           }(),
           [](World& w) {
    w.target->credentials = {"alice", "s3cret"};
    auto g = w.connect();
    g->send("authed", true);
    REQUIRE(w.drive(*g, [&] { return g->eof || g->error != 0; }));
    CHECK(g->in == "authed");
    CHECK(w.server.seen().last_methods == std::vector<uint8_t>{2});
    CHECK(w.server.seen().auth_failures == 0);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1; }));
          }},
      {"wrong password: the dial fails (not a refusal) and the guest is reset",
       [] {
    Socks5Script s = script(Then::echo);
    s.require_auth = true;
    s.username = "alice";
    s.password = "s3cret";
    return s;
       }(),
       [](World& w) {
    w.target->credentials = {"alice", "wrong"};
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.failed == 1);
    CHECK(w.obs.reason == "socks5: auth_failed");
    CHECK(w.obs.cause == kib::relay::DialCause::socks5);
    CHECK(w.obs.close_reasons == std::vector{kib::relay::CloseReason::dial_failed});
    CHECK_FALSE(w.obs.refused);
    CHECK(w.obs.established == 0);
    CHECK(w.server.seen().auth_failures == 1);
      }},
      {"the server refuses the CONNECT (reply 5): dial failed with its code, guest reset",
       [] {
    Socks5Script s = script(Then::echo);
    s.reply = 5;
    return s;
       }(),
       [](World& w) {
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.failed == 1);
    CHECK(w.obs.reason.find("connection_refused") != std::string::npos);
    CHECK_FALSE(w.obs.refused);
      }},
      {"the address policy refuses the endpoint: refused, no connection to it at all", script(Then::echo),
       [](World& w) {
    w.obs.policy = kib::policy::EndpointAddressPolicy{};  // 127.0.0.0/8 not exempt
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.failed == 1);
    CHECK(w.obs.refused);
    CHECK(w.obs.cause == kib::relay::DialCause::refused);
    CHECK(w.obs.reason.find("refused endpoint address") != std::string::npos);
    CHECK(w.server.seen().connections == 0);
       }},
      {"the server closes without answering the greeting: dial failed",
       [] {
    Socks5Script s = script(Then::echo);
    s.handshake = Handshake::close_at_greeting;
    return s;
       }(),
       [](World& w) {
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.reason == "endpoint closed the connection during the handshake");
    CHECK(w.obs.cause == kib::relay::DialCause::closed);
      }},
      {"50 connections at once on one loop, each gets its own bytes back", script(Then::echo),
       [](World& w) { many_echoes(w, 50, 3000); }},
      {"a provided-buffer ring of 2: recvs run dry (ENOBUFS) and wait for buffers, bytes intact", script(Then::echo),
       [](World& w) { many_echoes(w, 8, 300000); }, false, 2},
      {"the server resets the connection at the greeting: dial failed with the error",
       [] {
    Socks5Script s = script(Then::echo);
    s.handshake = Handshake::rst_at_greeting;
    return s;
       }(),
       [](World& w) {
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.reason == "endpoint recv: Connection reset by peer");
    CHECK(w.obs.cause == kib::relay::DialCause::io_error);
      }},
      {"nothing listens at the Egress: connect refused", script(Then::echo),
       [](World& w) {
    const kib::test::DeadPort dead = kib::test::dead_loopback_port();
    REQUIRE(dead.port != 0);
    w.target->endpoint.port = dead.port;
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.reason == "connect 127.0.0.1:" + std::to_string(dead.port) + ": Connection refused");
    CHECK(w.obs.cause == kib::relay::DialCause::connect);
    CHECK_FALSE(w.obs.refused);
       }},
      {"the Egress never accepts (its accept queue is full): connect timeout (stepped)", script(Then::echo),
       [](World& w) {
    // listen(0) with one connection queued and never accepted: further SYNs are dropped.
    kib::UniqueFd full(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(full.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(full.get(), 0) == 0);
    REQUIRE(getsockname(full.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    Guest filler(a);
    w.target->endpoint.port = ntohs(a.sin_port);
    auto g = w.connect();
    w.loop.settle(30);
    CHECK(w.obs.failed == 0);
    w.loop.step(w.timeouts.connect_ms + 100);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.reason == "connect 127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + ": timed out");
       }},
      {"RST from the guest: the destination is reset", script(Then::hold),
       [](World& w) {
    auto g = w.connect();
    g->send("x");
    REQUIRE(w.drive(*g, [&] { return w.server.seen().received == "x"; }));
    reset_guest(*g);
    REQUIRE(w.loop.drive([&] { return w.obs.released == 1; }));
    REQUIRE(w.server_until([](const Socks5Seen& s) { return s.finished == 1; }));
    CHECK_FALSE(w.server.seen().peer_eof);  // a reset, not a FIN
    CHECK(w.obs.close_reasons == std::vector{kib::relay::CloseReason::guest_reset});
       }},
      {"RST from the guest while the dial waits for the server: closed at once, not when the dial ends", stalled(),
       [](World& w) {
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return !w.server.seen().last_methods.empty(); }));
    reset_guest(*g);
    // No clock step: the handshake timeout is far off.
    REQUIRE(w.loop.drive([&] { return w.obs.released == 1; }));
    CHECK(w.obs.failed == 0);
    CHECK(w.obs.close_reasons == std::vector{kib::relay::CloseReason::guest_reset});
       }},
      {"the guest half-closes while the dial waits: the request and its FIN reach the destination",
       script(Then::reply_after_eof),
       [](World& w) {
    auto g = w.connect();
    g->send("early request", true);  // before the dial ends, most likely
    REQUIRE(w.drive(*g, [&] { return g->eof || g->error != 0; }));
    CHECK(g->error == 0);
    CHECK(g->in == "hello from upstream");
    CHECK(w.server.seen().received == "early request");
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1; }));
    CHECK(w.obs.close_reasons == std::vector{kib::relay::CloseReason::guest_closed});
       }},
      {"TLS: 2 MiB echoed intact, by copy (never splice: TLS needs the bytes)",
       [] {
    Socks5Script s = script(Then::echo);
    s.tls = &cert();
    return s;
       }(),
       [](World& w) {
    const size_t n = 2u << 20;
    Sent sent = send_pattern(w, n);
    auto& g = sent.guest;
    const int pipes_before = sent.pipes_before, max_pipes = sent.max_pipes;
    CHECK(max_pipes == pipes_before);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1; }));
      },
      true},
      {"TLS: a burst's buffers are given back once the connection has been quiet a second",
       [] {
    Socks5Script s = script(Then::echo);
    s.tls = &cert();
    return s;
       }(),
       [](World& w) {
    RelayConnection* c = nullptr;
    auto g = w.connect(&c);
    const std::string burst(256 * 1024, 'b');
    g->send(burst);
    REQUIRE(w.drive(
        *g, [&] { return g->in.size() == burst.size(); }, 8000));
    CHECK((g->in == burst));
    CHECK(c->tls_buffer_bytes() > 2 * 4096);
    w.loop.step(1300);
    CHECK(c->tls_buffer_bytes() == 0);
    g->send("after");
    REQUIRE(w.drive(*g, [&] { return g->in.size() == burst.size() + 5; }));
    CHECK(g->in.substr(burst.size()) == "after");
    g->send("", true);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1; }));
      },
      true},
      {"TLS half-close up -> guest: close_notify reaches the guest as EOF, it can still send",
       [] {
    Socks5Script s = script(Then::send_and_shut);
    s.tls = &cert();
    return s;
       }(),
       [](World& w) {
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return g->eof || g->error != 0; }));
    CHECK(g->error == 0);
    CHECK(g->in == "hello from upstream");
    g->send("late words", true);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1; }));
    REQUIRE(w.server_until([](const Socks5Seen& s) { return s.finished == 1; }));
    CHECK(w.server.seen().received == "late words");
    CHECK(w.server.seen().peer_eof);  // close_notify
      },
      true},
      {"half-close guest -> up: the destination sees EOF, its reply after that reaches the guest",
       script(Then::reply_after_eof),
       [](World& w) {
    auto g = w.connect();
    g->send("request", true);
    REQUIRE(w.drive(*g, [&] { return g->eof || g->error != 0; }));
    CHECK(g->error == 0);
    CHECK(g->in == "hello from upstream");
    CHECK(w.server.seen().received == "request");
    CHECK(w.server.seen().peer_eof);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1; }));
    CHECK(w.obs.failed == 0);
    CHECK(w.obs.close_reasons == std::vector{kib::relay::CloseReason::guest_closed});
       }},
      {"half-close up -> guest: the guest sees EOF and can still send; both FINs close it", script(Then::send_and_shut),
       [](World& w) {
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return g->eof || g->error != 0; }));
    CHECK(g->in == "hello from upstream");
    CHECK(w.obs.released == 0);
    g->send("late words", true);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1; }));
    CHECK(g->error == 0);
    REQUIRE(w.server_until([](const Socks5Seen& s) { return s.finished == 1; }));
    CHECK(w.server.seen().received == "late words");
    CHECK(w.server.seen().peer_eof);
    CHECK(w.obs.close_reasons == std::vector{kib::relay::CloseReason::upstream_closed});
       }},
      {"RST from the destination: the guest is reset", script(Then::rst_after_read),
       [](World& w) {
    auto g = w.connect();
    g->send("x");
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.established == 1);
    CHECK(w.obs.failed == 0);
    CHECK(w.obs.close_reasons == std::vector{kib::relay::CloseReason::upstream_reset});
       }},
      {"idle timeout: nothing for idle_ms (stepped, not slept) resets both sides", script(Then::hold),
       [](World& w) {
    auto g = w.connect();
    g->send("a");
    REQUIRE(w.drive(*g, [&] { return w.server.seen().received == "a"; }));
    w.loop.step(w.timeouts.idle_ms - 200);  // the wheel's tick is 50 ms
    w.loop.settle(20);
    g->pump();
    CHECK(g->error == 0);
    CHECK(w.obs.closed == 0);
    w.loop.step(400);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    REQUIRE(w.server_until([](const Socks5Seen& s) { return s.finished == 1; }));
    CHECK(w.obs.close_reasons == std::vector{kib::relay::CloseReason::idle_timeout});
       }},
      {"activity restarts the idle timer", script(Then::hold),
       [](World& w) {
    auto g = w.connect();
    g->send("a");
    REQUIRE(w.drive(*g, [&] { return w.server.seen().received == "a"; }));
    w.loop.step(w.timeouts.idle_ms - 1000);
    g->send("b");
    REQUIRE(w.drive(*g, [&] { return w.server.seen().received == "ab"; }));
    w.loop.step(2000);  // past the first deadline, not the one "b" set
    w.loop.settle(20);
    g->pump();
    CHECK(g->error == 0);
    CHECK(w.obs.closed == 0);
    w.loop.step(w.timeouts.idle_ms);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
       }},
      {"drain: bytes still flow until the deadline, then both sides are reset", script(Then::echo),
       [](World& w) {
    RelayConnection* c = nullptr;
    auto g = w.connect(&c);
    g->send("before");
    REQUIRE(w.drive(*g, [&] { return g->in == "before"; }));
    c->drain_until(w.loop.loop->now_ms() + 5000);
    CHECK(c->draining());
    c->drain_until(w.loop.loop->now_ms() + 1);  // keeps its own deadline
    w.loop.step(1000);
    g->send("during");
    REQUIRE(w.drive(*g, [&] { return g->in == "beforeduring"; }));
    CHECK(w.obs.closed == 0);
    w.loop.step(4200);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.closed == 1);
    CHECK(w.obs.close_reasons == std::vector{kib::relay::CloseReason::drain_deadline});
       }},
      {"drain with a deadline already past closes at once; abort resets", script(Then::echo),
       [](World& w) {
    RelayConnection* c = nullptr;
    auto g = w.connect(&c);
    g->send("x");
    REQUIRE(w.drive(*g, [&] { return g->in == "x"; }));
    c->drain_until(w.loop.loop->now_ms());
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    auto g2 = w.connect(&c);
    g2->send("y");
    REQUIRE(w.drive(*g2, [&] { return g2->in == "y"; }));
    c->abort();
    REQUIRE(w.drive(*g2, [&] { return w.obs.released == 2 && g2->error != 0; }));
    CHECK(g2->reset());
       }},
      {"bulk: 8 MiB each way arrive intact, through splice",
       [] {
    Socks5Script s = script(Then::bulk);
    s.bulk_bytes = 8u << 20;
    return s;
       }(),
       [](World& w) {
    const size_t n = 8u << 20;
    Sent sent = send_pattern(w, n);
    auto& g = sent.guest;
    const int pipes_before = sent.pipes_before, max_pipes = sent.max_pipes;
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1; }));
    REQUIRE(w.server_until([](const Socks5Seen& s) { return s.finished == 1; }));
    CHECK(w.server.seen().bulk_received == n);
    CHECK(w.server.seen().bulk_ok);
    CHECK(max_pipes > pipes_before);  // a splice pipe was open while the bytes moved
      }},
      {"pipelined greeting and request, the request never answered: timeout, pipelining off",
       [] {
    Socks5Script s = script(Then::echo);
    s.handshake = Handshake::stall_request;
    return s;
       }(),
       [](World& w) {
    w.target->socks_pipelining = true;
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return !w.server.seen().last_destination.empty(); }));
    w.loop.settle(200);  // the greeting's reply is read in (not observable: real time, generous)
    CHECK(w.obs.failed == 0);
    w.loop.step(w.timeouts.handshake_ms + 100);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(g->reset());
    CHECK(w.obs.reason ==
          "handshake timed out (the SOCKS5 server answered the greeting only: requests now wait for each reply)");
    CHECK_FALSE(w.target->socks_pipelining.load());
      }},
      {"the server never answers the greeting: handshake timeout (stepped)", stalled(),
       [](World& w) {
    auto g = w.connect();
    REQUIRE(w.drive(*g, [&] { return !w.server.seen().last_methods.empty(); }));
    w.loop.step(w.timeouts.handshake_ms - 200);
    w.loop.settle(10);
    CHECK(w.obs.failed == 0);
    w.loop.step(400);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 1 && g->error != 0; }));
    CHECK(w.obs.reason == "handshake timed out");
    CHECK(w.obs.cause == kib::relay::DialCause::timeout);
    CHECK(g->reset());
       }},
      {"take-over: moved out and resumed six times in bulk both ways (copied and spliced), every byte arrives "
       "once and in order",
       script(Then::echo),
       [](World& w) {
    const size_t n = 6u << 20;
    std::string data(n, '\0');
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>(Socks5TestServer::pattern(i));
    RelayConnection* c = nullptr;
    auto g = w.connect(&c);
    g->send(data, true);
    REQUIRE(w.drive(*g, [&] { return w.obs.established == 1; }));
    for (size_t at :
         {size_t{1}, size_t{64} << 10, size_t{600} << 10, size_t{2} << 20, size_t{3} << 20, size_t{5} << 20}) {
      CAPTURE(at);
      REQUIRE(w.drive(
          *g, [&] { return g->in.size() >= at || g->eof || g->error != 0; }, 8000));
      REQUIRE(!g->eof);
      c = move_and_resume(w, *g, c);
    }
    REQUIRE(w.drive(
        *g, [&] { return g->eof || g->error != 0; }, 8000));
    CHECK(g->error == 0);
    CHECK(g->in.size() == n);
    CHECK((g->in == data));
    CHECK(w.obs.moved.size() == 6);
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 7; }));
       }},
      {"take-over: an idle connection moved out and resumed relays on; a draining one keeps its deadline",
       script(Then::echo),
       [](World& w) {
    RelayConnection* c = nullptr;
    auto g = w.connect(&c);
    g->send("ping");
    REQUIRE(w.drive(*g, [&] { return g->in == "ping" || g->error != 0; }));
    c->drain_until((*w.loop).now_ms() + 60000);
    c = move_and_resume(w, *g, c);
    CHECK(c->draining());
    g->send("pong", true);
    REQUIRE(w.drive(*g, [&] { return g->eof || g->error != 0; }));
    CHECK(g->error == 0);
    CHECK(g->in == "pingpong");
    REQUIRE(w.drive(*g, [&] { return w.obs.released == 2; }));
       }},
      {"TLS: a resolved name, the SOCKS5 exchange and the bytes inside TLS; the next dial resumes",
       [] {
    Socks5Script s = script(Then::echo);
    s.tls = &cert();
    return s;
       }(),
       [](World& w) {
    for (int i = 0; i < 2; ++i) {
      CAPTURE(i);
      auto g = w.connect();
      g->send("secret " + std::to_string(i), true);
      REQUIRE(w.drive(*g, [&] { return g->eof || g->error != 0; }));
      CHECK(g->error == 0);
      CHECK(g->in == "secret " + std::to_string(i));
      REQUIRE(w.drive(*g, [&] { return w.obs.released == i + 1; }));
      REQUIRE(w.server_until([&](const Socks5Seen& s) { return s.finished == i + 1; }));
    }
    CHECK(w.obs.resolves == 2);
    CHECK(w.server.seen().tls_full == 1);
    CHECK(w.server.seen().tls_resumed == 1);
      },
      true},
      };
  return all;
}

}  // namespace

TEST_CASE("relay connection: table of cases on a real ring, with and without direct descriptors") {
  (void)cert();  // OpenSSL's one-time setup, before the fd count
  for (uint32_t slots : {0u, 64u}) {
    for (const Case& c : cases()) {
      const std::string name = c.name;
      CAPTURE(slots);
      CAPTURE(name);
      const int fds_before = kib::test::count_fds();
      int released = 0, closed = 0, established = 0, failed = 0, abandoned = 0;
      {
        World w(slots, c.script, c.tls, c.buffers_posted);
        c.body(w);
        released = w.obs.released;
        closed = w.obs.closed;
        established = w.obs.established;
        failed = w.obs.failed;
        abandoned = w.obs.abandoned;
        w.loop.settle(5);  // CQEs of nobody's (the bounded waits') come in
      }
      CHECK(released == closed);  // each connection closed once, released once
      CHECK(established + failed + abandoned == released);
      CHECK(kib::test::count_fds() == fds_before);
    }
  }
}
