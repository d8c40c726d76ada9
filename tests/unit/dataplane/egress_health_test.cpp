// probe_socks5_server (Egress health, the pipelining probe): how far one probe gets
// against the in-process SOCKS5 server, plain and inside TLS; and EgressHealth's state
// from it.
#include <doctest/doctest.h>
#include <sys/socket.h>

#include <stop_token>

#include "agent/dataplane/egress_health.h"
#include "agent/relay/socks5_pipelining_probe.h"
#include "tests/unit/relay/tls_test_server.h"
#include "tests/unit/support/dead_port.h"
#include "tests/unit/support/socks5_test_server.h"

using kib::relay::DialTarget;
using kib::relay::EgressDial;
using kib::relay::ProbeOptions;
using kib::relay::ProbeResult;
using kib::test::Socks5Script;
using kib::test::Socks5TestServer;
using Handshake = Socks5Script::Handshake;

namespace {

ProbeOptions options() {
  ProbeOptions o;
  o.address_policy = kib::policy::EndpointAddressPolicy{{kib::policy::Cidr::parse("127.0.0.0/8").value()}};
  o.timeout = std::chrono::milliseconds(300);
  return o;
}

std::unique_ptr<DialTarget> target_at(uint16_t port, const char* ca_pem = nullptr) {
  auto t = std::make_unique<DialTarget>();
  t->endpoint = {"127.0.0.1", port, kib::policy::IpAddress::parse("127.0.0.1").value()};
  if (ca_pem != nullptr) t->tls = kib::relay::TlsClientContext::create("socks.test", ca_pem).value();
  return t;
}

ProbeResult probe(const std::unique_ptr<DialTarget>& t) {
  auto r = kib::relay::probe_socks5_server(*t, options(), /*pipelined=*/false, std::stop_token{});
  REQUIRE(r.ok());
  return *r;
}

}  // namespace

TEST_CASE("probe: a server that answers the whole exchange is healthy") {
  Socks5Script s;
  s.reply = 2;  // refuses the CONNECT to 0.0.0.0:0: an answer all the same
  Socks5TestServer server(s);
  const ProbeResult r = probe(target_at(server.port()));
  CHECK(r.connected);
  CHECK(r.request_answered);
  kib::dataplane::EgressHealth h;
  CHECK(h.view().state == "unknown");
  CHECK(h.record(r, false) == "unknown");
  CHECK(h.view().state == "healthy");
  CHECK(h.view().last_success.time_since_epoch().count() != 0);
  CHECK(h.view().probe_failures == 0);
}

TEST_CASE("probe: a server that never answers the greeting is socks_failed, with why") {
  Socks5Script s;
  s.handshake = Handshake::stall;
  Socks5TestServer server(s);
  const ProbeResult r = probe(target_at(server.port()));
  CHECK(r.connected);
  CHECK_FALSE(r.request_answered);
  CHECK(r.failed_in == EgressDial::Stage::socks5);
  CHECK(r.failure == "no answer within 300 ms");
  kib::dataplane::EgressHealth h;
  h.record(r, false);
  CHECK(h.view().state == "socks_failed");
  CHECK(h.view().last_failure_reason == "no answer within 300 ms");
  CHECK(h.view().probe_failures == 1);
}

TEST_CASE("probe: nothing listening is unreachable") {
  const kib::test::DeadPort dead = kib::test::dead_loopback_port();
  REQUIRE(dead.port != 0);
  const ProbeResult r = probe(target_at(dead.port));
  CHECK_FALSE(r.connected);
  CHECK(r.failed_in == EgressDial::Stage::connect);
  CHECK(r.failure.find("Connection refused") != std::string::npos);
  kib::dataplane::EgressHealth h;
  h.record(r, false);
  CHECK(h.view().state == "unreachable");
}

TEST_CASE("probe: inside TLS, verified then answered; a CA that did not sign the server is tls_failed") {
  Socks5Script s;
  s.tls = &kib::test::socks_server_cert();
  Socks5TestServer server(s);
  const ProbeResult ok = probe(target_at(server.port(), kib::test::socks_server_cert().pem.c_str()));
  CHECK(ok.tls_verified);
  CHECK(ok.request_answered);
  static auto other = kib::test::make_cert("other.test", "DNS:other.test");
  const ProbeResult bad = probe(target_at(server.port(), other->pem.c_str()));
  CHECK(bad.connected);
  CHECK_FALSE(bad.tls_verified);
  CHECK_FALSE(bad.request_answered);
  CHECK(bad.failed_in == EgressDial::Stage::tls);
  CHECK(bad.failure.find("tls: ") == 0);
  kib::dataplane::EgressHealth h;
  h.record(bad, true);
  CHECK(h.view().state == "tls_failed");
  h.record(ok, true);
  CHECK(h.view().state == "healthy");
  CHECK(h.view().probe_failures == 1);  // the history stays
}
