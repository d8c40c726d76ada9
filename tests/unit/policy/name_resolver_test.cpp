// Resolver tests use only 127.0.0.1: a tiny DNS responder written here answers on a
// random loopback port, and a bound socket that never answers proves the timeout.
#include <doctest/doctest.h>
#include <poll.h>

#include <chrono>

#include "agent/policy/async_resolver.h"
#include "agent/policy/name_resolver.h"
#include "tests/unit/policy/dns_responder.h"

using kib::policy::AsyncResolver;
using kib::policy::IpAddress;
using kib::policy::ResolverOptions;
using Clock = std::chrono::steady_clock;
using kib::policy::testing::DnsResponder;
using kib::policy::testing::LoopbackUdp;

namespace {

IpAddress ip(const char* s) { return *IpAddress::parse(s); }

}  // namespace

TEST_CASE("resolver: an IP literal resolves to itself without any query") {
  LoopbackUdp silent;
  ResolverOptions o;
  o.servers = {silent.server()};
  o.timeout = std::chrono::milliseconds(300);
  auto r = kib::policy::resolve_host("192.0.2.44", o);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 1);
  CHECK((*r)[0] == ip("192.0.2.44"));
  auto r6 = kib::policy::resolve_host("2001:db8::44", o);
  REQUIRE(r6.ok());
  REQUIRE(r6->size() == 1);
  CHECK((*r6)[0] == ip("2001:db8::44"));
}

TEST_CASE("resolver: localhost comes from the hosts file, not the network") {
  LoopbackUdp silent;  // a DNS server that never answers: any DNS use would time out
  ResolverOptions o;
  o.servers = {silent.server()};
  o.timeout = std::chrono::milliseconds(2000);
  const auto start = Clock::now();
  auto r = kib::policy::resolve_host("localhost", o);
  REQUIRE(r.ok());
  REQUIRE(!r->empty());
  for (const auto& a : *r) CHECK_MESSAGE((a == ip("::1") || (a.family == AF_INET && a.bytes[0] == 127)), a.to_string());
  CHECK(Clock::now() - start < std::chrono::milliseconds(1500));
}

TEST_CASE("resolver: a name is resolved through the configured server") {
  DnsResponder dns("egress.test", {"127.0.0.42"});
  ResolverOptions o;
  o.servers = {dns.server()};
  o.timeout = std::chrono::milliseconds(3000);
  auto r = kib::policy::resolve_host("egress.test", o);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 1);
  CHECK((*r)[0] == ip("127.0.0.42"));
  CHECK(dns.queries() >= 1);
}

TEST_CASE("resolver: NXDOMAIN is an empty result, not an error") {
  DnsResponder dns("egress.test", {"127.0.0.42"});
  ResolverOptions o;
  o.servers = {dns.server()};
  o.timeout = std::chrono::milliseconds(3000);
  auto r = kib::policy::resolve_host("missing.test", o);
  REQUIRE(r.ok());
  CHECK(r->empty());
}

TEST_CASE("resolver: a server that never answers ends in an empty result within the timeout") {
  LoopbackUdp silent;
  ResolverOptions o;
  o.servers = {silent.server()};
  o.timeout = std::chrono::milliseconds(400);
  const auto start = Clock::now();
  auto r = kib::policy::resolve_host("egress.test", o);
  const auto took = Clock::now() - start;
  REQUIRE(r.ok());
  CHECK(r->empty());
  CHECK(took >= std::chrono::milliseconds(350));
  CHECK(took < std::chrono::milliseconds(2000));  // generous: CI runs loaded, under ASan
}

TEST_CASE("resolver: bad server strings are invalid_argument") {
  for (const char* bad : {"dns.example.com", "127.0.0.1:0", "[::1]:0", "[::1]", "1.2.3.4:99999", "fe80::1%lo"}) {
    ResolverOptions o;
    o.servers = {bad};
    auto r = kib::policy::resolve_host("x.test", o);
    CHECK_MESSAGE(!r.ok(), std::string(bad));
    if (!r.ok()) CHECK(r.error().code == kib::Code::invalid_argument);
  }
  ResolverOptions ok;
  ok.servers = {"127.0.0.1", "::1", "[::1]:5353", "127.0.0.1:53"};
  CHECK(AsyncResolver::create(ok).ok());
  CHECK(kib::policy::validate_resolver_options(ok).ok());
  ResolverOptions many;
  many.servers = std::vector<std::string>(9, "127.0.0.1");
  CHECK(!kib::policy::validate_resolver_options(many).ok());
  ResolverOptions zero;
  zero.timeout = std::chrono::milliseconds(0);
  CHECK(!kib::policy::validate_resolver_options(zero).ok());
  ResolverOptions bad;
  bad.servers = {"dns.example.com:53"};
  CHECK(kib::policy::validate_resolver_options(bad).error().code == kib::Code::invalid_argument);
}

TEST_CASE("async resolver: driven by an external loop, sockets reported through the hook") {
  DnsResponder dns("egress.test", {"127.0.0.7"});
  ResolverOptions o;
  o.servers = {dns.server()};
  o.timeout = std::chrono::milliseconds(3000);
  int hook_calls = 0;
  auto made = AsyncResolver::create(o, [&](const AsyncResolver::SocketInterest&) { ++hook_calls; });
  REQUIRE(made.ok());
  AsyncResolver& r = **made;
  std::vector<kib::Result<std::vector<IpAddress>>> results;
  r.resolve("egress.test", [&](kib::Result<std::vector<IpAddress>> x) { results.push_back(std::move(x)); });
  r.resolve("missing.test", [&](kib::Result<std::vector<IpAddress>> x) { results.push_back(std::move(x)); });
  CHECK(r.pending() == 2);
  CHECK(!r.sockets().empty());
  const auto end = Clock::now() + std::chrono::seconds(5);
  while (results.size() < 2 && Clock::now() < end) {
    std::vector<pollfd> fds;
    for (const auto& s : r.sockets()) fds.push_back({s.fd, static_cast<short>(s.read ? POLLIN : 0), 0});
    const int wait = static_cast<int>(r.next_timeout().value_or(std::chrono::milliseconds(50)).count());
    if (poll(fds.data(), fds.size(), wait) <= 0) {
      r.process_timeouts();
      continue;
    }
    for (const auto& p : fds)
      if (p.revents != 0) r.process_fd(p.fd, -1);
  }
  REQUIRE(results.size() == 2);
  CHECK(r.pending() == 0);
  CHECK(hook_calls >= 1);
  bool saw_answer = false, saw_empty = false;
  for (auto& x : results) {
    REQUIRE(x.ok());
    if (x->size() == 1 && (*x)[0] == ip("127.0.0.7")) saw_answer = true;
    if (x->empty()) saw_empty = true;
  }
  CHECK(saw_answer);
  CHECK(saw_empty);
}

TEST_CASE("async resolver: destroying it with lookups pending runs their callbacks once") {
  LoopbackUdp silent;
  ResolverOptions o;
  o.servers = {silent.server()};
  o.timeout = std::chrono::milliseconds(5000);
  int calls = 0;
  bool failed = false;
  {
    auto made = AsyncResolver::create(o);
    REQUIRE(made.ok());
    (*made)->resolve("egress.test", [&](kib::Result<std::vector<IpAddress>> x) {
      ++calls;
      failed = !x.ok();
    });
    CHECK((*made)->pending() == 1);
  }
  CHECK(calls == 1);
  CHECK(failed);
}

namespace {
// Runs the resolver's loop until c-ares holds no lookup (or the bound passes).
void drive_until_idle(AsyncResolver& r, std::chrono::milliseconds bound) {
  const auto end = Clock::now() + bound;
  while (r.next_timeout().has_value() && Clock::now() < end) {
    std::vector<pollfd> fds;
    for (const auto& s : r.sockets()) fds.push_back({s.fd, static_cast<short>(s.read ? POLLIN : 0), 0});
    if (poll(fds.data(), fds.size(), static_cast<int>(r.next_timeout()->count())) <= 0) {
      r.process_timeouts();
      continue;
    }
    for (const auto& p : fds)
      if (p.revents != 0) r.process_fd(p.fd, -1);
  }
}
}  // namespace

TEST_CASE("async resolver: a lookup past its timeout reports empty once, even when c-ares finishes later") {
  LoopbackUdp silent;
  ResolverOptions o;
  o.servers = {silent.server()};
  o.timeout = std::chrono::milliseconds(200);
  auto made = AsyncResolver::create(o);
  REQUIRE(made.ok());
  int calls = 0;
  bool empty = false;
  const auto start = Clock::now();
  std::chrono::steady_clock::duration took{};
  (*made)->resolve("egress.test", [&](kib::Result<std::vector<IpAddress>> x) {
    ++calls;
    empty = x.ok() && x->empty();
    took = Clock::now() - start;
  });
  drive_until_idle(**made, std::chrono::seconds(5));
  CHECK(!(*made)->next_timeout().has_value());
  CHECK(calls == 1);
  CHECK(empty);
  CHECK(took >= std::chrono::milliseconds(180));
  CHECK(took < std::chrono::milliseconds(1500));  // generous: CI runs loaded, under ASan
  CHECK((*made)->pending() == 0);
}

TEST_CASE("async resolver: lookups in flight are capped") {
  LoopbackUdp silent;
  ResolverOptions o;
  o.servers = {silent.server()};
  o.timeout = std::chrono::milliseconds(10000);
  auto made = AsyncResolver::create(o);
  REQUIRE(made.ok());
  int errors = 0, exhausted = 0;
  for (int i = 0; i < 4097; ++i) {
    std::string name = "n";  // not `"n" + ...`: GCC 12 -Wrestrict false positive (PR 105329) at -O3
    name += std::to_string(i);
    name += ".test";
    (*made)->resolve(name, [&](kib::Result<std::vector<IpAddress>> x) {
      if (!x.ok()) ++errors;
      if (!x.ok() && x.error().code == kib::Code::resource_exhausted) ++exhausted;
    });
  }
  CHECK(exhausted == 1);
  CHECK((*made)->pending() == 4096);
  made = kib::make_error(kib::Code::canceled, "drop");  // destroys the resolver: every lookup ends once
  CHECK(errors == 4097);
}
