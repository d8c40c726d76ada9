#include "agent/relay/socks5_pipelining_probe.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "agent/common/errno_error.h"
#include "agent/common/unique_fd.h"
#include "agent/relay/egress_dial.h"
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

// 0 and *out connected, or the connect's errno (ETIMEDOUT past the deadline);
// an Error only when stopped or poll itself failed.
Result<int> connect_to(const SocketAddress& peer, Clock::time_point deadline, const std::stop_token& stop,
                       UniqueFd* out) {
  UniqueFd fd(::socket(peer.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return errno;
  if (::connect(fd.get(), &peer.sa, peer.length()) != 0 && errno != EINPROGRESS) return errno;
  auto ready = wait_for(fd.get(), POLLOUT, deadline, stop);
  if (!ready.ok()) return std::move(ready).error();
  if (!*ready) return ETIMEDOUT;
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  if (err == 0) *out = std::move(fd);
  return err;
}

}  // namespace

// The dial is the one every connection makes (egress_dial.h), driven by blocking
// calls.
Result<ProbeResult> probe_socks5_server(const DialTarget& target, const ProbeOptions& options, bool pipelined,
                                        std::stop_token stop) {
  using Step = EgressDial::Step;
  SocketAddress nowhere{};  // 0.0.0.0:0
  nowhere.v4.sin_family = AF_INET;
  EgressDial dial(DialPlan{
      .egress = &target, .destination = nowhere, .pipelined = pipelined, .address_policy = &options.address_policy});
  ProbeResult r;
  EgressDial::Stage at = EgressDial::Stage::resolve;  // the stage before the last event
  auto stopped = [&](Step step) {
    r.failed_in = step == Step::failed ? at : dial.stage();
    if (step == Step::failed) r.failure = dial.failure().reason;
  };
  Step step = dial.start();
  if (step == Step::resolve) step = dial.on_resolved(policy::resolve_host(dial.host(), options.resolver));
  if (step == Step::failed) {  // the name did not resolve, or every address was refused
    r.failed_in = EgressDial::Stage::resolve;
    r.failure = dial.failure().reason;
    return r;
  }
  UniqueFd fd;
  while (step == Step::connect) {
    auto err = connect_to(dial.peer(), Clock::now() + options.timeout, stop, &fd);
    if (!err.ok()) return std::move(err).error();
    at = EgressDial::Stage::connect;
    step = dial.on_connected(*err);
  }
  if (step == Step::failed && fd) {  // connected, and failed at once (a TLS session could not be made)
    r.connected = true;
    stopped(step);
    return r;
  }
  if (!fd) {  // never connected
    r.failed_in = EgressDial::Stage::connect;
    r.failure = dial.failure().reason;
    return r;
  }
  r.connected = true;
  // Sends what the dial has to send and reads the replies until the CONNECT's is in,
  // the server closes, or the deadline.
  const auto deadline = Clock::now() + options.timeout;
  while (step == Step::exchange) {
    uint8_t out[Socks5Client::kMaxOutput];
    while (size_t n = dial.take_out(out, sizeof out))
      if (::send(fd.get(), out, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) {
        stopped(step);
        r.failure = std::string("send: ") + std::strerror(errno);
        return r;
      }
    if (dial.stage() == EgressDial::Stage::socks5 && target.tls) r.tls_verified = true;
    at = dial.stage();
    auto ready = wait_for(fd.get(), POLLIN, deadline, stop);
    if (!ready.ok()) return std::move(ready).error();
    if (!*ready) {
      stopped(step);
      r.failure = "no answer within " + std::to_string(options.timeout.count()) + " ms";
      break;
    }
    uint8_t in[512];
    ssize_t got = ::recv(fd.get(), in, sizeof in, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      stopped(step);
      r.failure = got == 0 ? "closed without answering" : std::string("recv: ") + std::strerror(errno);
      break;
    }
    step = dial.on_received(in, static_cast<size_t>(got));
  }
  r.request_answered = dial.request_answered();
  if (r.request_answered && target.tls) r.tls_verified = true;
  if (!r.request_answered && r.failure.empty()) stopped(step);
  if (r.failure.empty() && !r.request_answered) r.failure = "no answer to the request";
  return r;
}

Result<bool> probe_socks5_pipelining(const DialTarget& target, const ProbeOptions& options, std::stop_token stop) {
  if (target.tls) return Error{Code::unimplemented, "not probed inside TLS"};
  KIB_TRY_ASSIGN(ProbeResult r, probe_socks5_server(target, options, /*pipelined=*/true, stop));
  if (!r.connected) return Error{Code::unavailable, r.failure};
  return r.request_answered;
}

}  // namespace kib::relay
