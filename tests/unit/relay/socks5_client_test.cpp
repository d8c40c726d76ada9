// RFC 1928 / RFC 1929 client state machine: every step, partial input, every reply.
#include <arpa/inet.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "agent/relay/socks5_client.h"

using kib::relay::Socks5Client;
using kib::relay::Socks5Credentials;
using kib::relay::Socks5Failure;
using State = Socks5Client::State;

namespace {

sockaddr_in v4(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

sockaddr_in6 v6(const char* ip, uint16_t port) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(port);
  inet_pton(AF_INET6, ip, &a.sin6_addr);
  return a;
}

std::vector<uint8_t> bytes(std::string_view s) { return {s.begin(), s.end()}; }

size_t feed(Socks5Client& c, const std::vector<uint8_t>& b) { return c.feed(b.data(), b.size()); }

// The request due now, as bytes (empty when none is due).
std::vector<uint8_t> out(const Socks5Client& c) {
  if (!c.output_due()) return {};
  uint8_t buf[Socks5Client::kMaxOutput];
  size_t n = c.write_output(buf);
  return {buf, buf + n};
}

const std::vector<uint8_t> kSuccessV4 = {5, 0, 0, 1, 10, 0, 0, 1, 0x04, 0x38};

}  // namespace

TEST_CASE("greeting offers only no-auth when no username is configured") {
  Socks5Credentials creds;
  auto dst = v4("10.0.0.5", 80);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  CHECK(out(c) == std::vector<uint8_t>{5, 1, 0});
}

TEST_CASE("greeting offers only user/password when a username is configured") {
  Socks5Credentials creds{"alice", "secret"};
  auto dst = v4("10.0.0.5", 80);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  CHECK(out(c) == std::vector<uint8_t>{5, 1, 2});
}

TEST_CASE("no-auth: CONNECT to the original IPv4 destination uses ATYP 1") {
  Socks5Credentials creds;
  auto dst = v4("203.0.113.7", 443);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  c.take_output();
  CHECK(feed(c, {5, 0}) == 2);
  CHECK(c.state() == State::connect);
  CHECK(out(c) == std::vector<uint8_t>{5, 1, 0, 1, 203, 0, 113, 7, 0x01, 0xbb});
  c.take_output();
  CHECK(feed(c, kSuccessV4) == kSuccessV4.size());
  CHECK(c.state() == State::done);
  CHECK(c.failure() == Socks5Failure::none);
}

TEST_CASE("CONNECT to an IPv6 destination uses ATYP 4") {
  Socks5Credentials creds;
  auto dst = v6("2001:db8::1", 8080);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  c.take_output();
  feed(c, {5, 0});
  auto req = out(c);
  REQUIRE(req.size() == 4 + 16 + 2);
  CHECK(req[3] == 4);
  CHECK(req[4] == 0x20);
  CHECK(req[5] == 0x01);
  CHECK(req[19] == 1);
  CHECK(req[20] == 0x1f);
  CHECK(req[21] == 0x90);
}

TEST_CASE("user/password: RFC 1929 request, then CONNECT after status 0") {
  Socks5Credentials creds{"bob", "pw"};
  auto dst = v4("10.1.2.3", 22);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  c.take_output();
  feed(c, {5, 2});
  CHECK(c.state() == State::auth);
  CHECK(out(c) == std::vector<uint8_t>{1, 3, 'b', 'o', 'b', 2, 'p', 'w'});
  c.take_output();
  feed(c, {1, 0});
  CHECK(c.state() == State::connect);
  CHECK(out(c).size() == 10);
}

TEST_CASE("nothing is due while a reply is awaited") {
  Socks5Credentials creds;
  auto dst = v4("10.0.0.5", 80);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  c.take_output();
  CHECK(!c.output_due());
  uint8_t half = 5;
  c.feed(&half, 1);
  CHECK(!c.output_due());
  CHECK(c.state() == State::greeting);
}

TEST_CASE("user/password: a non-zero status is auth_failed") {
  Socks5Credentials creds{"bob", "pw"};
  auto dst = v4("10.1.2.3", 22);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  feed(c, {5, 2});
  feed(c, {1, 1});
  CHECK(c.state() == State::failed);
  CHECK(c.failure() == Socks5Failure::auth_failed);
}

TEST_CASE("a method we did not offer, or 0xFF, is no_acceptable_method") {
  Socks5Credentials none;
  Socks5Credentials creds{"u", "p"};
  auto dst = v4("10.1.2.3", 22);
  for (auto [cr, method] : {std::pair{&none, 0xff}, std::pair{&none, 2}, std::pair{&creds, 0}}) {
    Socks5Client c(*cr, reinterpret_cast<sockaddr*>(&dst));
    c.start();
    feed(c, {5, static_cast<uint8_t>(method)});
    CHECK(c.state() == State::failed);
    CHECK(c.failure() == Socks5Failure::no_acceptable_method);
  }
}

TEST_CASE("a non-SOCKS5 server is bad_version") {
  Socks5Credentials creds;
  auto dst = v4("10.1.2.3", 22);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  feed(c, bytes("HTTP/1.1 400"));
  CHECK(c.failure() == Socks5Failure::bad_version);
}

TEST_CASE("every reply code maps to its own failure") {
  const Socks5Failure expected[] = {
      Socks5Failure::general_failure,       Socks5Failure::not_allowed_by_ruleset,
      Socks5Failure::network_unreachable,   Socks5Failure::host_unreachable,
      Socks5Failure::connection_refused,    Socks5Failure::ttl_expired,
      Socks5Failure::command_not_supported, Socks5Failure::address_type_not_supported,
  };
  Socks5Credentials creds;
  auto dst = v4("10.1.2.3", 22);
  for (int rep = 1; rep <= 10; ++rep) {
    CAPTURE(rep);
    Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
    c.start();
    feed(c, {5, 0});
    feed(c, {5, static_cast<uint8_t>(rep), 0, 1, 0, 0, 0, 0, 0, 0});
    CHECK(c.state() == State::failed);
    CHECK(c.failure() == (rep <= 8 ? expected[rep - 1] : Socks5Failure::unknown_reply_code));
    CHECK(!kib::relay::socks5_failure_name(c.failure()).empty());
  }
}

TEST_CASE("a reply with a bad address type is malformed_reply") {
  Socks5Credentials creds;
  auto dst = v4("10.1.2.3", 22);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  feed(c, {5, 0});
  feed(c, {5, 0, 0, 7, 0});
  CHECK(c.failure() == Socks5Failure::malformed_reply);
}

TEST_CASE("partial input: every message arriving one byte at a time") {
  Socks5Credentials creds{"u", "p"};
  auto dst = v4("10.1.2.3", 22);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  std::vector<uint8_t> all = {5, 2, 1, 0, 5, 0, 0, 4};
  for (int i = 0; i < 16; ++i) all.push_back(0);
  all.push_back(0);
  all.push_back(80);
  for (uint8_t b : all) {
    REQUIRE(c.state() != State::failed);
    CHECK(c.feed(&b, 1) == 1);
  }
  CHECK(c.state() == State::done);
}

TEST_CASE("a domain-typed bound address is skipped by its length") {
  Socks5Credentials creds;
  auto dst = v4("10.1.2.3", 22);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  feed(c, {5, 0});
  std::vector<uint8_t> r = {5, 0, 0, 3, 4, 'h', 'o', 's', 't', 0, 1};
  CHECK(feed(c, r) == r.size());
  CHECK(c.state() == State::done);
}

TEST_CASE("bytes after the CONNECT reply are left for the tunnel") {
  Socks5Credentials creds;
  auto dst = v4("10.1.2.3", 22);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  c.take_output();
  feed(c, {5, 0});
  c.take_output();  // the CONNECT goes out before its reply is read
  auto r = kSuccessV4;
  r.push_back('X');
  r.push_back('Y');
  CHECK(feed(c, r) == kSuccessV4.size());
  CHECK(c.state() == State::done);
}

TEST_CASE("feeding stops where a request falls due: a reply sent ahead of it is not consumed") {
  // Found by tests/fuzz/socks5_client_fuzz.cpp: fed whole, greeting reply and CONNECT
  // reply ended the exchange with the CONNECT never written.
  Socks5Credentials creds;
  auto dst = v4("10.1.2.3", 22);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  REQUIRE(out(c).size() == 3);
  c.take_output();
  std::vector<uint8_t> early = {5, 0};
  early.insert(early.end(), kSuccessV4.begin(), kSuccessV4.end());
  CHECK(feed(c, early) == 2);
  CHECK(c.state() == State::connect);
  CHECK(out(c).size() == 10);  // the CONNECT is due; the caller decides about the rest
}

TEST_CASE("pipelined no-auth: greeting and CONNECT go out together, nothing more is due") {
  Socks5Credentials creds;
  auto dst = v4("10.0.0.5", 1080);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst), /*pipelined=*/true);
  c.start();
  CHECK(out(c) == std::vector<uint8_t>{5, 1, 0, 5, 1, 0, 1, 10, 0, 0, 5, 0x04, 0x38});
  c.take_output();
  // Both replies in one read, and tunnelled bytes behind them.
  std::vector<uint8_t> in = {5, 0};
  in.insert(in.end(), kSuccessV4.begin(), kSuccessV4.end());
  in.push_back('x');
  CHECK(feed(c, in) == in.size() - 1);
  CHECK(c.state() == State::done);
  CHECK_FALSE(c.output_due());
}

TEST_CASE("pipelined user/password: greeting, RFC 1929 request and CONNECT together") {
  Socks5Credentials creds{"al", "pw"};
  auto dst = v6("2001:db8::1", 443);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst), true);
  c.start();
  std::vector<uint8_t> want = {5, 1, 2, 1, 2, 'a', 'l', 2, 'p', 'w', 5, 1, 0, 4};
  want.insert(want.end(), {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x01, 0xbb});
  CHECK(out(c) == want);
  c.take_output();
  CHECK(feed(c, {5, 2}) == 2);
  CHECK(c.state() == State::auth);
  CHECK_FALSE(c.output_due());  // the request went with the greeting
  CHECK(feed(c, {1, 0}) == 2);
  CHECK(c.state() == State::connect);
  CHECK_FALSE(c.output_due());
  feed(c, kSuccessV4);
  CHECK(c.state() == State::done);
}

TEST_CASE("the largest pipelined output fits kMaxOutput") {
  Socks5Credentials creds{std::string(255, 'u'), std::string(255, 'p')};
  auto dst = v6("2001:db8::1", 443);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst), true);
  c.start();
  CHECK(out(c).size() == Socks5Client::kMaxOutput);
}

TEST_CASE("connect_answered: a reply code to the CONNECT, not a greeting or auth failure") {
  Socks5Credentials creds;
  auto dst = v4("0.0.0.0", 0);
  Socks5Client refused(creds, reinterpret_cast<sockaddr*>(&dst), true);
  refused.start();
  feed(refused, {5, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0});
  CHECK(refused.failure() == Socks5Failure::not_allowed_by_ruleset);
  CHECK(refused.connect_answered());
  Socks5Client greeting_only(creds, reinterpret_cast<sockaddr*>(&dst), true);
  greeting_only.start();
  feed(greeting_only, {5, 0});
  CHECK_FALSE(greeting_only.connect_answered());
  Socks5Client no_method(creds, reinterpret_cast<sockaddr*>(&dst), true);
  no_method.start();
  feed(no_method, {5, 0xff});
  CHECK(no_method.failure() == Socks5Failure::no_acceptable_method);
  CHECK_FALSE(no_method.connect_answered());
}

TEST_CASE("UDP ASSOCIATE: the request carries command 3; the reply's BND.ADDR and BND.PORT are kept") {
  Socks5Credentials creds;
  auto zeros = v6("::", 0);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&zeros), false, kib::relay::Socks5Command::udp_associate);
  c.start();
  c.take_output();
  feed(c, {5, 0});
  CHECK(out(c) == std::vector<uint8_t>{5, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  c.take_output();
  const std::vector<uint8_t> reply = {5, 0, 0, 4, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x13, 0x88};
  CHECK(feed(c, reply) == reply.size());
  REQUIRE(c.state() == State::done);
  const auto b = c.bound();
  CHECK_FALSE(b.is_domain);
  REQUIRE(b.address.sa.sa_family == AF_INET6);
  CHECK(ntohs(b.address.v6.sin6_port) == 5000);
  CHECK(b.address.v6.sin6_addr.s6_addr[0] == 0xfd);
  CHECK(b.address.v6.sin6_addr.s6_addr[15] == 1);
}

TEST_CASE("bytes_wanted never reaches past the current reply") {
  Socks5Credentials creds;
  auto dst = v4("203.0.113.7", 443);
  Socks5Client c(creds, reinterpret_cast<sockaddr*>(&dst));
  c.start();
  c.take_output();
  CHECK(c.bytes_wanted() == 2);
  feed(c, {5});
  CHECK(c.bytes_wanted() == 1);
  feed(c, {0});
  c.take_output();
  CHECK(c.bytes_wanted() == 5);  // up to ATYP and the first address byte
  feed(c, {5, 0, 0, 1, 10});
  CHECK(c.bytes_wanted() == 5);  // the rest of an IPv4 BND and the port
  feed(c, {0, 0, 1, 0x04, 0x38});
  CHECK(c.state() == State::done);
  CHECK(c.bytes_wanted() == 0);
}
