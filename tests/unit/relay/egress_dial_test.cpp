// EgressDial, the one dial every user drives: a table of dials against a scripted
// SOCKS5 server (plain, or inside TLS on memory BIOs), each case checking what went
// on the wire, the outcome, and what the dialed socket starts with.
#include <arpa/inet.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "agent/relay/egress_dial.h"
#include "tests/unit/relay/tls_test_server.h"

using kib::relay::DialPlan;
using kib::relay::DialTarget;
using kib::relay::EgressDial;
using kib::relay::Socks5Command;
using kib::relay::SocketAddress;
using kib::relay::TlsClientContext;
using kib::relay::TlsSession;
using kib::policy::IpAddress;
using Step = EgressDial::Step;

namespace {

IpAddress ip(const char* text) { return IpAddress::parse(text).value(); }
SocketAddress sock(const char* text, uint16_t port) { return kib::relay::to_socket_address(ip(text), port); }
std::string s(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

// The guest's original destination, and the replies a server gives.
const std::string kGreetNoAuth = s({5, 1, 0});
const std::string kGreetUserPass = s({5, 1, 2});
const std::string kAuthU1P1 = s({1, 2, 'u', '1', 2, 'p', '1'});
const std::string kConnect = s({5, 1, 0, 1, 93, 184, 216, 34, 0, 80});  // 93.184.216.34:80
const std::string kChoseNoAuth = s({5, 0});
const std::string kChoseUserPass = s({5, 2});
const std::string kAuthOk = s({1, 0});
const std::string kAuthBad = s({1, 1});
const std::string kOkV4 = s({5, 0, 0, 1, 10, 1, 2, 3, 0x13, 0x88});  // BND 10.1.2.3:5000
const std::string kRefused = s({5, 5, 0, 1, 0, 0, 0, 0, 0, 0});

enum class End { none, close, timeout };

struct Case {
  const char* name;
  std::optional<std::vector<const char*>> resolved{};  // nullopt: the resolver failed
  std::vector<int> connect_errors{};                   // per connect, 0 when missing
  bool auth = false;
  bool tls = false;
  bool pipelined = false;
  Socks5Command command = Socks5Command::connect;
  std::vector<std::string> replies{};  // the server's answer to each message it reads
  End end = End::none;                 // what happens when the server has no more to say
  bool one_byte_at_a_time = false;
  // Expected.
  Step step = Step::dialed;
  std::vector<const char*> connected{};  // every address connect was asked for
  std::string sent{};                    // every plaintext byte the client sent
  std::string reason{};                  // contained in the failure's reason
  bool refused = false;
  bool pipelining_unanswered = false;
  std::string leftover{};  // the tunnel's first bytes, after the reply
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {.name = "no auth: greeting, then CONNECT to the original destination",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {kChoseNoAuth, kOkV4},
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect},
      {.name = "user/pass: greeting offers only method 2, then RFC 1929, then CONNECT",
       .resolved = std::vector{"8.8.8.8"},
       .auth = true,
       .replies = {kChoseUserPass, kAuthOk, kOkV4},
       .connected = {"8.8.8.8"},
       .sent = kGreetUserPass + kAuthU1P1 + kConnect},
      {.name = "the server refusing the CONNECT fails the dial with its reply code",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {kChoseNoAuth, kRefused},
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect,
       .reason = "socks5: connection_refused"},
      {.name = "a CONNECT reply sent ahead of the CONNECT fails the dial; the request was never sent",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {kChoseNoAuth + kOkV4},
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth,
       .reason = "answered ahead of the request"},
      {.name = "... also when it arrives a byte at a time, before the CONNECT was taken out",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {kChoseNoAuth + kOkV4},
       .one_byte_at_a_time = true,
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth,
       .reason = "answered ahead of the request"},
      {.name = "wrong credentials fail the dial as auth_failed",
       .resolved = std::vector{"8.8.8.8"},
       .auth = true,
       .replies = {kChoseUserPass, kAuthBad},
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetUserPass + kAuthU1P1,
       .reason = "socks5: auth_failed"},
      {.name = "every address special-purpose: refused, naming each, and nothing is connected",
       .resolved = std::vector{"127.0.0.1", "10.0.0.1"},
       .step = Step::failed,
       .connected = {},
       .reason = "refused endpoint address: address 127.0.0.1 is in",
       .refused = true},
      {.name = "special-purpose addresses are skipped before any connect; the others are tried",
       .resolved = std::vector{"127.0.0.1", "8.8.8.8", "::1"},
       .replies = {kChoseNoAuth, kOkV4},
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect},
      {.name = "the first address fails to connect, the second works",
       .resolved = std::vector{"1.1.1.1", "8.8.8.8"},
       .connect_errors = {ECONNREFUSED, 0},
       .replies = {kChoseNoAuth, kOkV4},
       .connected = {"1.1.1.1", "8.8.8.8"},
       .sent = kGreetNoAuth + kConnect},
      {.name = "every connect fails: the last error, not a refusal",
       .resolved = std::vector{"1.1.1.1", "2606:4700::1111"},
       .connect_errors = {ECONNREFUSED, ETIMEDOUT},
       .step = Step::failed,
       .connected = {"1.1.1.1", "2606:4700::1111"},
       .reason = "connect [2606:4700::1111]:1080: timed out"},
      {.name = "the resolver failing fails the dial, naming the host",
       .resolved = std::nullopt,
       .step = Step::failed,
       .reason = "resolve socks.test: resolver down"},
      {.name = "a name without addresses fails the dial",
       .resolved = std::vector<const char*>{},
       .step = Step::failed,
       .reason = "resolve socks.test: no address"},
      {.name = "TLS: the same exchange inside TLS",
       .resolved = std::vector{"8.8.8.8"},
       .auth = true,
       .tls = true,
       .replies = {kChoseUserPass, kAuthOk, kOkV4},
       .connected = {"8.8.8.8"},
       .sent = kGreetUserPass + kAuthU1P1 + kConnect},
      {.name = "TLS: a refusal inside TLS",
       .resolved = std::vector{"8.8.8.8"},
       .tls = true,
       .replies = {kChoseNoAuth, kRefused},
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect,
       .reason = "socks5: connection_refused"},
      {.name = "pipelined: greeting and CONNECT in one message, both replies at once",
       .resolved = std::vector{"8.8.8.8"},
       .pipelined = true,
       .replies = {kChoseNoAuth + kOkV4},
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect},
      {.name = "pipelined with auth: greeting, credentials and CONNECT in one message",
       .resolved = std::vector{"8.8.8.8"},
       .auth = true,
       .pipelined = true,
       .replies = {kChoseUserPass + kAuthOk + kOkV4},
       .connected = {"8.8.8.8"},
       .sent = kGreetUserPass + kAuthU1P1 + kConnect},
      {.name = "pipelined, only the greeting answered, then closed: says so",
       .resolved = std::vector{"8.8.8.8"},
       .pipelined = true,
       .replies = {kChoseNoAuth},
       .end = End::close,
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect,
       .reason = "closed the connection during the handshake (the SOCKS5 server answered the greeting only",
       .pipelining_unanswered = true},
      {.name = "not pipelined, no reply to the CONNECT until the deadline: timed out, not a pipelining failure",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {kChoseNoAuth},
       .end = End::timeout,
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect,
       .reason = "handshake timed out"},
      {.name = "UDP ASSOCIATE: command 3 with zeros of the endpoint's family; the reply's relay address",
       .resolved = std::vector{"8.8.8.8"},
       .command = Socks5Command::udp_associate,
       .replies = {kChoseNoAuth, kOkV4},
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + s({5, 3, 0, 1, 0, 0, 0, 0, 0, 0})},
      {.name = "leftover: bytes after the reply are the tunnel's first bytes",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {kChoseNoAuth, kOkV4 + "SSH-2.0-x\r\n"},
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect,
       .leftover = "SSH-2.0-x\r\n"},
      {.name = "leftover inside TLS stays in the session for the relay",
       .resolved = std::vector{"8.8.8.8"},
       .tls = true,
       .pipelined = true,
       .replies = {kChoseNoAuth + kOkV4 + "220 smtp\r\n"},
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect,
       .leftover = "220 smtp\r\n"},
      {.name = "replies split into single bytes still parse, leftover included",
       .resolved = std::vector{"8.8.8.8"},
       .auth = true,
       .replies = {kChoseUserPass, kAuthOk, kOkV4 + "hi"},
       .one_byte_at_a_time = true,
       .connected = {"8.8.8.8"},
       .sent = kGreetUserPass + kAuthU1P1 + kConnect,
       .leftover = "hi"},
      {.name = "garbage: an HTTP answer is bad_version",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {"HTTP/1.1 400 Bad Request\r\n"},
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth,
       .reason = "socks5: bad_version (not a SOCKS5 server: its reply starts 48 54 \"HT\")"},
      {.name = "garbage: no acceptable method",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {s({5, 0xff})},
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth,
       .reason = "socks5: no_acceptable_method"},
      {.name = "garbage: a reply with an unknown address type is malformed",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {kChoseNoAuth, s({5, 0, 0, 9, 0, 0, 0, 0, 0, 0})},
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth + kConnect,
       .reason = "socks5: malformed_reply"},
      {.name = "the endpoint closing before any reply fails the dial",
       .resolved = std::vector{"8.8.8.8"},
       .replies = {},
       .end = End::close,
       .step = Step::failed,
       .connected = {"8.8.8.8"},
       .sent = kGreetNoAuth,
       .reason = "endpoint closed the connection during the handshake"},
  };
  return all;
}

// The server's side: plaintext, or TLS on memory BIOs.
class Peer {
 public:
  explicit Peer(const kib::test::Cert* cert) {
    if (cert != nullptr) tls_.emplace(*cert);
  }
  // Wire bytes from the client; returns the plaintext that came with them.
  std::string receive(const uint8_t* data, size_t n) {
    if (!tls_) return std::string(reinterpret_cast<const char*>(data), n);
    BIO_write(tls_->in(), data, static_cast<int>(n));
    std::string plain;
    if (!SSL_is_init_finished(tls_->ssl())) SSL_do_handshake(tls_->ssl());
    char buf[4096];
    int got;
    while ((got = SSL_read(tls_->ssl(), buf, sizeof buf)) > 0) plain.append(buf, static_cast<size_t>(got));
    return plain;
  }
  void send(const std::string& plain) {
    if (!tls_) {
      wire_ += plain;
      return;
    }
    if (!plain.empty()) SSL_write(tls_->ssl(), plain.data(), static_cast<int>(plain.size()));
  }
  std::string take_wire() {
    if (tls_) {
      char buf[16384];
      int n;
      while ((n = BIO_read(tls_->out(), buf, sizeof buf)) > 0) wire_.append(buf, static_cast<size_t>(n));
    }
    return std::exchange(wire_, {});
  }

 private:
  std::optional<kib::test::Server> tls_;
  std::string wire_;
};

struct Outcome {
  Step step;
  std::vector<std::string> connected;
  std::string sent;
  kib::relay::DialFailure failure;
  std::string leftover;
  std::optional<SocketAddress> bound;
};

Outcome run(const Case& c) {
  static auto cert = kib::test::make_cert("socks.test", "DNS:socks.test");
  DialTarget target;
  target.endpoint.host = "socks.test";
  target.endpoint.port = 1080;
  if (c.auth) target.credentials = {"u1", "p1"};
  if (c.tls) target.tls = TlsClientContext::create("socks.test", cert->pem).value();
  const kib::policy::EndpointAddressPolicy strict;
  DialPlan plan{.egress = &target,
                .destination = sock("93.184.216.34", 80),
                .command = c.command,
                .pipelined = c.pipelined,
                .address_policy = &strict};
  EgressDial dial(plan);
  Peer peer(c.tls ? cert.get() : nullptr);
  Outcome out{};

  Step step = dial.start();
  REQUIRE(step == Step::resolve);
  if (!c.resolved) {
    step = dial.on_resolved(kib::Error{kib::Code::unavailable, "resolver down"});
  } else {
    std::vector<IpAddress> addrs;
    for (const char* a : *c.resolved) addrs.push_back(ip(a));
    step = dial.on_resolved(addrs);
  }
  while (step == Step::connect) {
    const std::string a = IpAddress::from_sockaddr(&dial.peer().sa).to_string();
    out.connected.push_back(dial.peer().sa.sa_family == AF_INET6 ? "[" + a + "]" : a);
    CHECK(ntohs(dial.peer().v4.sin_port) == 1080);
    const size_t i = out.connected.size() - 1;
    step = dial.on_connected(i < c.connect_errors.size() ? c.connect_errors[i] : 0);
  }
  size_t next_reply = 0;
  std::string last_chunk, undelivered;
  for (int round = 0; round < 64 && step == Step::exchange; ++round) {
    uint8_t buf[4096];
    std::string plain;
    while (size_t n = dial.take_out(buf, sizeof buf)) plain += peer.receive(buf, n);
    out.sent += plain;
    if (!plain.empty() && next_reply < c.replies.size()) peer.send(c.replies[next_reply++]);
    const std::string wire = peer.take_wire();
    if (wire.empty()) break;
    const size_t piece = c.one_byte_at_a_time ? 1 : wire.size();
    for (size_t at = 0; at < wire.size() && step == Step::exchange; at += piece) {
      last_chunk = wire.substr(at, piece);
      step = dial.on_received(reinterpret_cast<const uint8_t*>(last_chunk.data()), last_chunk.size());
      if (step == Step::dialed) undelivered = wire.substr(std::min(wire.size(), at + piece));
    }
  }
  if (step == Step::exchange && c.end == End::close) step = dial.on_closed();
  if (step == Step::exchange && c.end == End::timeout) step = dial.on_timeout();
  out.step = step;
  if (step == Step::failed) out.failure = dial.failure();
  if (step == Step::dialed) {
    if (auto tls = dial.take_tls()) {
      REQUIRE(c.tls);
      char buf[256];
      size_t n = 0;
      while (tls->read(reinterpret_cast<uint8_t*>(buf), sizeof buf, &n) == TlsSession::Io::ok)
        out.leftover.append(buf, n);
    } else {
      CHECK_FALSE(c.tls);
      out.leftover = last_chunk.substr(dial.consumed()) + undelivered;
    }
    out.bound = dial.bound().address;
  }
  return out;
}

}  // namespace

TEST_CASE("egress dial: the table") {
  for (const Case& c : cases()) {
    const std::string name = c.name;
    CAPTURE(name);
    Outcome o = run(c);
    CAPTURE(o.failure.reason);
    CHECK(o.step == c.step);
    std::vector<std::string> want(c.connected.begin(), c.connected.end());
    for (auto& w : want)
      if (w.find(':') != std::string::npos) w = "[" + w + "]";
    CHECK(o.connected == want);
    CHECK(o.sent == c.sent);
    if (c.step == Step::failed) {
      CHECK(o.failure.reason.find(c.reason) != std::string::npos);
      CHECK(o.failure.refused == c.refused);
      CHECK(o.failure.pipelining_unanswered == c.pipelining_unanswered);
    }
    if (c.step == Step::dialed) CHECK(o.leftover == c.leftover);
  }
}

TEST_CASE("egress dial: a refusal names every refused address") {
  Case c{.name = "", .resolved = std::vector{"127.0.0.1", "10.0.0.1"}, .step = Step::failed};
  Outcome o = run(c);
  CHECK(o.failure.refused);
  CHECK(o.failure.reason.find("127.0.0.1") != std::string::npos);
  CHECK(o.failure.reason.find("10.0.0.1") != std::string::npos);
}

TEST_CASE("egress dial: UDP ASSOCIATE's reply gives the relay address") {
  Case c{.name = "",
         .resolved = std::vector{"8.8.8.8"},
         .command = Socks5Command::udp_associate,
         .replies = {kChoseNoAuth, kOkV4}};
  Outcome o = run(c);
  REQUIRE(o.step == Step::dialed);
  REQUIRE(o.bound);
  CHECK(kib::relay::to_string(*o.bound) == "10.1.2.3:5000");
}

TEST_CASE("egress dial: an IP literal endpoint is checked too, without resolving") {
  DialTarget target;
  target.endpoint = {"127.0.0.1", 1080, ip("127.0.0.1")};
  const kib::policy::EndpointAddressPolicy strict;
  EgressDial dial(DialPlan{.egress = &target, .destination = sock("93.184.216.34", 80), .address_policy = &strict});
  CHECK(dial.start() == Step::failed);
  CHECK(dial.failure().refused);
  const kib::policy::EndpointAddressPolicy exempt({kib::policy::Cidr::parse("127.0.0.0/8").value()});
  EgressDial allowed(DialPlan{.egress = &target, .destination = sock("93.184.216.34", 80), .address_policy = &exempt});
  CHECK(allowed.start() == Step::connect);
  CHECK(kib::relay::to_string(allowed.peer()) == "127.0.0.1:1080");
}

TEST_CASE("egress dial: straight to a destination, without an Egress, ends at the connect") {
  EgressDial dial(DialPlan{.destination = sock("10.0.0.53", 53)});
  REQUIRE(dial.start() == Step::connect);
  CHECK(kib::relay::to_string(dial.peer()) == "10.0.0.53:53");
  CHECK(dial.on_connected(ECONNREFUSED) == Step::failed);
  CHECK(dial.failure().reason == "connect 10.0.0.53:53: Connection refused");
  EgressDial ok(DialPlan{.destination = sock("10.0.0.53", 53)});
  REQUIRE(ok.start() == Step::connect);
  CHECK(ok.on_connected(0) == Step::dialed);
  CHECK(ok.pending_out() == 0);
}

TEST_CASE("egress dial: a connect deadline is a timed-out connect, and the next address is tried") {
  DialTarget target;
  target.endpoint = {"8.8.8.8", 1080, ip("8.8.8.8")};
  const kib::policy::EndpointAddressPolicy strict;
  EgressDial dial(DialPlan{.egress = &target, .destination = sock("93.184.216.34", 80), .address_policy = &strict});
  REQUIRE(dial.start() == Step::connect);
  CHECK(dial.on_timeout() == Step::failed);
  CHECK(dial.failure().reason == "connect 8.8.8.8:1080: timed out");
  CHECK_FALSE(dial.failure().refused);
}
