#include "agent/relay/egress_dial.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "agent/policy/endpoint_check.h"

namespace kib::relay {
namespace {

// Without pipelining a server answers each request after reading it; bytes before
// our request went out (or beyond the reply to the one before) answer one it was
// never sent. Taking them as the answer would relay the tunnel's first bytes to a
// server still waiting for its CONNECT.
constexpr const char* kAnsweredAhead = "socks5: the server answered ahead of the request";

}  // namespace

std::string_view dial_cause_name(DialCause c) {
  static constexpr std::array<std::string_view, kDialCauseCount> kNames = {
      "resolve", "refused", "connect", "tls", "socks5", "closed", "timeout", "io_error", "local"};
  const auto i = static_cast<size_t>(c);
  return i < kNames.size() ? kNames[i] : "unknown";
}

EgressDial::Stage EgressDial::stage() const {
  switch (step_) {
    case Step::resolve: return Stage::resolve;
    case Step::connect: return Stage::connect;
    case Step::exchange: return tls_handshaking_ ? Stage::tls : Stage::socks5;
    default: return Stage::done;
  }
}

std::string to_string(const SocketAddress& a) {
  const auto ip = policy::IpAddress::from_sockaddr(&a.sa).to_string();
  if (a.sa.sa_family == AF_INET6) return "[" + ip + "]:" + std::to_string(ntohs(a.v6.sin6_port));
  return ip + ":" + std::to_string(ntohs(a.v4.sin_port));
}

EgressDial::EgressDial(const DialPlan& plan) : plan_(plan) {}

EgressDial::Step EgressDial::start() {
  if (plan_.egress == nullptr) {
    addresses_ = {policy::IpAddress::from_sockaddr(&plan_.destination.sa)};
    return connect_next();
  }
  const auto& ep = plan_.egress->endpoint;
  if (ep.ip) return on_resolved(std::vector<policy::IpAddress>{*ep.ip});
  return step_ = Step::resolve;
}

// "check every resolved address ... connect only to an address that passed": all
// of them before the first connect, so that a refusal never depends on which address
// answered first.
EgressDial::Step EgressDial::on_resolved(Result<std::vector<policy::IpAddress>> addresses) {
  const std::string& name = plan_.egress->endpoint.host;
  if (!addresses.ok()) return fail(DialCause::resolve, "resolve " + name + ": " + addresses.error().message);
  if (addresses->empty()) return fail(DialCause::resolve, "resolve " + name + ": no address");
  auto targets = policy::filter_dial_targets(*addresses, *plan_.address_policy);
  if (targets.allowed.empty()) {
    std::string refusals;
    for (const auto& e : targets.refused) refusals += (refusals.empty() ? "" : "; ") + e.message;
    return fail(DialCause::refused, "refused endpoint address: " + refusals);
  }
  addresses_ = std::move(targets.allowed);
  return connect_next();
}

EgressDial::Step EgressDial::connect_next() {
  if (next_ >= addresses_.size()) return fail(DialCause::connect, last_error_);
  const uint16_t port = plan_.egress != nullptr
                            ? plan_.egress->endpoint.port
                            : ntohs(plan_.destination.sa.sa_family == AF_INET6 ? plan_.destination.v6.sin6_port
                                                                               : plan_.destination.v4.sin_port);
  peer_ = to_socket_address(addresses_[next_++], port);
  return step_ = Step::connect;
}

EgressDial::Step EgressDial::on_connected(int err) {
  if (step_ != Step::connect) return step_;
  if (err != 0) {
    last_error_ = "connect " + to_string(peer_) + ": " + (err == ETIMEDOUT ? "timed out" : strerror(err));
    return connect_next();
  }
  if (plan_.egress == nullptr) return step_ = Step::dialed;
  step_ = Step::exchange;
  if (plan_.egress->tls) {
    auto s = TlsSession::create(plan_.egress->tls);
    if (!s.ok()) return fail(DialCause::local, "tls: " + s.error().message);
    tls_ = std::move(s.value());
    tls_handshaking_ = true;
    return handshake();
  }
  return start_socks();
}

EgressDial::Step EgressDial::handshake() {
  switch (tls_->handshake()) {
    case TlsSession::Io::ok: tls_handshaking_ = false; return start_socks();
    case TlsSession::Io::want_read: return step_;
    default: return fail(DialCause::tls, "tls: " + tls_->last_error());
  }
}

EgressDial::Step EgressDial::start_socks() {
  SocketAddress dst = plan_.destination;
  if (plan_.command == Socks5Command::udp_associate) {
    // "the client MUST use a port number and address of all zeros" when it does not
    // know them yet; the UDP socket's family follows the endpoint's.
    dst = SocketAddress{};
    dst.sa.sa_family = peer_.sa.sa_family;
  }
  socks_.emplace(plan_.egress->credentials, &dst.sa, plan_.pipelined, plan_.command);
  socks_->start();
  return queue_socks_output();
}

// The request due now goes out as plaintext, or through SSL_write inside TLS.
EgressDial::Step EgressDial::queue_socks_output() {
  if (!socks_->output_due()) return step_;
  if (out_off_ == out_len_) out_off_ = out_len_ = 0;
  uint8_t buf[Socks5Client::kMaxOutput];
  const size_t n = socks_->write_output(buf);
  socks_->take_output();
  if (tls_) {
    if (tls_->write(buf, n) != TlsSession::Io::ok) return fail(DialCause::tls, "tls: " + tls_->last_error());
    return step_;
  }
  // One request is due at a time, after the reply to the one before: the caller took
  // that one out already.
  if (out_len_ + n > sizeof out_) return fail(DialCause::socks5, "socks5: request queued behind an unsent one");
  std::memcpy(out_ + out_len_, buf, n);
  out_len_ = static_cast<uint16_t>(out_len_ + n);
  return step_;
}

size_t EgressDial::pending_out() const {
  if (tls_) return tls_->pending_out();
  return static_cast<size_t>(out_len_ - out_off_);
}

size_t EgressDial::take_out(uint8_t* buf, size_t cap) {
  if (tls_) return tls_->take_out(buf, cap);
  const size_t n = std::min(cap, static_cast<size_t>(out_len_ - out_off_));
  std::memcpy(buf, out_ + out_off_, n);
  out_off_ = static_cast<uint16_t>(out_off_ + n);
  return n;
}

EgressDial::Step EgressDial::on_received(const uint8_t* data, size_t len) {
  if (step_ != Step::exchange) return step_;
  if (!tls_ && out_off_ < out_len_)
    return fail(DialCause::socks5, kAnsweredAhead);  // our request is not even taken out
  if (!tls_) return feed_socks(data, len, &consumed_);
  consumed_ = len;
  tls_->feed(data, len);
  if (tls_handshaking_ && handshake() != Step::exchange) return step_;
  // Plaintext is read no further than the reply's end: what follows it belongs to
  // the tunnel and stays in the session for the relay to read.
  while (!tls_handshaking_ && step_ == Step::exchange) {
    uint8_t buf[512];
    size_t n = 0;
    const size_t want = std::min(socks_->bytes_wanted(), sizeof buf);
    switch (tls_->read(buf, want, &n)) {
      case TlsSession::Io::ok: {
        size_t used = 0;
        feed_socks(buf, n, &used);
        break;
      }
      case TlsSession::Io::want_read: return step_;
      case TlsSession::Io::closed: return on_closed();
      case TlsSession::Io::error: return fail(DialCause::tls, "tls: " + tls_->last_error());
    }
  }
  return step_;
}

EgressDial::Step EgressDial::feed_socks(const uint8_t* data, size_t len, size_t* used) {
  *used = socks_->feed(data, len);
  switch (socks_->state()) {
    case Socks5Client::State::failed: return fail(DialCause::socks5, "socks5: " + socks_->failure_text());
    case Socks5Client::State::done: return step_ = Step::dialed;
    default: break;
  }
  // feed() stopped where our next request falls due: bytes beyond it answer a
  // request the server has not been sent (only a pipelined client sends ahead).
  if (*used < len) return fail(DialCause::socks5, kAnsweredAhead);
  return queue_socks_output();
}

EgressDial::Step EgressDial::on_closed() {
  if (step_ != Step::exchange) return step_;
  return fail(DialCause::closed, "endpoint closed the connection during the handshake");
}

EgressDial::Step EgressDial::on_io_error(const char* op, int err) {
  if (step_ != Step::exchange) return step_;
  return fail(DialCause::io_error, std::string("endpoint ") + op + ": " + strerror(err));
}

EgressDial::Step EgressDial::on_timeout() {
  if (step_ == Step::connect) return on_connected(ETIMEDOUT);
  if (step_ == Step::dialed || step_ == Step::failed) return step_;
  return fail(DialCause::timeout, "handshake timed out");
}

EgressDial::Step EgressDial::fail(DialCause cause, std::string reason) {
  failure_.cause = cause;
  failure_.refused = cause == DialCause::refused;
  if (socks_ && socks_->pipelined() &&
      (socks_->state() == Socks5Client::State::auth || socks_->state() == Socks5Client::State::connect)) {
    // The server read the greeting but not the request sent with it (another server
    // behind the same endpoint now?).
    failure_.pipelining_unanswered = true;
    reason += " (the SOCKS5 server answered the greeting only: requests now wait for each reply)";
  }
  failure_.reason = std::move(reason);
  return step_ = Step::failed;
}

}  // namespace kib::relay
