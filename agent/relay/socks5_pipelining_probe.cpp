#include "agent/relay/socks5_pipelining_probe.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <vector>

#include "agent/common/errno_error.h"
#include "agent/common/unique_fd.h"
#include "agent/relay/socket_address.h"
#include "agent/relay/socks5_client.h"

namespace kib::relay {
namespace {

using Clock = std::chrono::steady_clock;

// Waits for `events` on fd until the deadline, in short slices so that a stop
// request (agent shutdown) ends the wait soon. true when ready.
Result<bool> wait_for(int fd, short events, Clock::time_point deadline, const std::stop_token& stop) {
  constexpr auto kSlice = std::chrono::milliseconds(100);
  while (!stop.stop_requested()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min(left, kSlice).count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return errno_error("poll");
  }
  return Error{Code::canceled, "stopped"};
}

Result<UniqueFd> connect_to(const SocketAddress& peer, Clock::time_point deadline, const std::stop_token& stop) {
  UniqueFd fd(::socket(peer.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return errno_error("socket");
  if (::connect(fd.get(), &peer.sa, peer.length()) != 0 && errno != EINPROGRESS) return errno_error("connect");
  auto ready = wait_for(fd.get(), POLLOUT, deadline, stop);
  if (!ready.ok()) return std::move(ready).error();
  if (!*ready) return Error{Code::unavailable, "connect: timed out"};
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno_error("getsockopt");
  if (err != 0) return errno_error("connect", err, Code::unavailable);
  return fd;
}

Result<std::vector<policy::IpAddress>> addresses_of(const DialTarget& target, const ProbeOptions& options) {
  std::vector<policy::IpAddress> resolved;
  if (target.endpoint.ip) {
    resolved.push_back(*target.endpoint.ip);
  } else {
    auto r = policy::resolve_host(target.endpoint.host, options.resolver);
    if (!r.ok()) return std::move(r).error();
    resolved = std::move(*r);
  }
  auto allowed = policy::filter_dial_targets(resolved, options.address_policy).allowed;
  if (allowed.empty()) return Error{Code::unavailable, "no address of " + target.endpoint.host + " may be dialed"};
  return allowed;
}

// Sends the pipelined requests and reads the replies until the CONNECT's is in, the
// server closes, or the deadline.
Result<bool> ask(int fd, const DialTarget& target, Clock::time_point deadline, const std::stop_token& stop) {
  SocketAddress nowhere{};  // 0.0.0.0:0
  nowhere.v4.sin_family = AF_INET;
  Socks5Client socks(target.credentials, &nowhere.sa, /*pipelined=*/true);
  socks.start();
  uint8_t out[Socks5Client::kMaxOutput];
  const size_t n = socks.write_output(out);
  socks.take_output();
  if (::send(fd, out, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) return errno_error("send", errno, Code::unavailable);
  while (socks.state() != Socks5Client::State::done && socks.state() != Socks5Client::State::failed) {
    auto ready = wait_for(fd, POLLIN, deadline, stop);
    if (!ready.ok()) return std::move(ready).error();
    if (!*ready) return false;  // answered the greeting at most, then waited
    uint8_t in[512];
    ssize_t got = ::recv(fd, in, sizeof in, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;  // closed (or reset) without answering the CONNECT
    socks.feed(in, static_cast<size_t>(got));
  }
  return socks.connect_answered();
}

}  // namespace

Result<bool> probe_socks5_pipelining(const DialTarget& target, const ProbeOptions& options, std::stop_token stop) {
  if (target.tls) return Error{Code::unimplemented, "not probed inside TLS"};
  auto addresses = addresses_of(target, options);
  if (!addresses.ok()) return std::move(addresses).error();
  Error last{Code::unavailable, "no address"};
  for (const auto& ip : *addresses) {
    const auto deadline = Clock::now() + options.timeout;
    auto fd = connect_to(to_socket_address(ip, target.endpoint.port), deadline, stop);
    if (fd.ok()) return ask(fd->get(), target, Clock::now() + options.timeout, stop);
    if (fd.error().code == Code::canceled) return std::move(fd).error();
    last = std::move(fd).error();
  }
  return last;
}

}  // namespace kib::relay
