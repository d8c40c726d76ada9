// Fuzz target: the SOCKS5 client state machine (agent/relay/socks5_client.cpp) fed a
// hostile server's byte stream. The first byte picks the client (pipelined or not,
// credentials or not, CONNECT or UDP ASSOCIATE, IPv4 or IPv6 destination); the rest is
// what the server sends. The stream is fed three ways: whole, one byte at a time, and
// in the pieces bytes_wanted() asks for (the TLS path's reads). Every way must reach
// the same state, failure, bound address and requests sent, and consume the same
// bytes: a split the state machine gets wrong is a finding, not only a crash.
#include <netinet/in.h>

#include <cstring>
#include <functional>
#include <string>

#include "agent/relay/socks5_client.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kib::fuzz::require;
using kib::relay::Socks5Client;

struct Outcome {
  Socks5Client::State state{};
  kib::relay::Socks5Failure failure{};
  size_t consumed = 0;
  std::string sent;
  kib::relay::Socks5Bound bound;
  bool answered = false;
};

// How many of `left` bytes to feed next, given what the client wants.
using Chunker = std::function<size_t(size_t left, size_t wanted)>;

Outcome drive(uint8_t options, std::span<const uint8_t> server, const Chunker& chunk) {
  static const kib::relay::Socks5Credentials kNone{};
  static const kib::relay::Socks5Credentials kUser{"user", std::string(255, 'p')};
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(443);
  v4.sin_addr.s_addr = htonl(0xcb007105);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(8443);
  v6.sin6_addr.s6_addr[0] = 0x20;
  v6.sin6_addr.s6_addr[15] = 1;
  const sockaddr* dst = (options & 8) ? reinterpret_cast<const sockaddr*>(&v6) : reinterpret_cast<const sockaddr*>(&v4);
  const auto command = (options & 4) ? kib::relay::Socks5Command::udp_associate : kib::relay::Socks5Command::connect;
  Socks5Client c((options & 2) ? kUser : kNone, dst, (options & 1) != 0, command);

  Outcome o;
  auto flush = [&] {
    while (c.output_due()) {
      uint8_t buf[Socks5Client::kMaxOutput];
      const size_t n = c.write_output(buf);
      require(n > 0 && n <= sizeof buf, "write_output within kMaxOutput");
      o.sent.append(reinterpret_cast<const char*>(buf), n);
      c.take_output();
    }
  };
  auto live = [&] {
    const auto s = c.state();
    return s == Socks5Client::State::greeting || s == Socks5Client::State::auth || s == Socks5Client::State::connect;
  };
  c.start();
  flush();
  while (o.consumed < server.size() && live()) {
    const size_t wanted = c.bytes_wanted();
    require(wanted > 0, "a live exchange wants bytes");
    const size_t n = chunk(server.size() - o.consumed, wanted);
    const size_t used = c.feed(server.data() + o.consumed, n);
    require(used <= n, "feed consumes no more than it is given");
    require(used > 0 || !live(), "feed makes progress while the exchange is live");
    o.consumed += used;
    flush();
  }
  if (!live()) require(c.bytes_wanted() == 0, "a finished exchange wants nothing");
  o.state = c.state();
  o.failure = c.failure();
  o.bound = c.bound();
  o.answered = c.connect_answered();
  require((o.failure == kib::relay::Socks5Failure::none) == (o.state != Socks5Client::State::failed),
          "a failure is named exactly when the exchange failed");
  return o;
}

bool same(const Outcome& a, const Outcome& b) {
  return a.state == b.state && a.failure == b.failure && a.consumed == b.consumed && a.sent == b.sent &&
         a.bound.is_domain == b.bound.is_domain && a.bound.address == b.bound.address && a.answered == b.answered;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kib::fuzz::FuzzInput in(data, size);
  const uint8_t options = in.byte();
  const auto server = in.rest();
  const Outcome whole = drive(options, server, [](size_t left, size_t) { return left; });
  const Outcome bytewise = drive(options, server, [](size_t, size_t) { return size_t{1}; });
  const Outcome asked =
      drive(options, server, [](size_t left, size_t wanted) { return wanted < left ? wanted : left; });
  require(same(whole, bytewise), "byte-at-a-time feeding agrees with whole feeding");
  require(same(whole, asked), "bytes_wanted-sized feeding agrees with whole feeding");
  return 0;
}
