#include "agent/dns/upstream_stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace kib::dns {
namespace {

// The request the relay's SOCKS5 client has due (greeting, auth or CONNECT), taken.
Bytes take_socks_output(relay::Socks5Client& c) {
  Bytes out;
  if (!c.output_due()) return out;
  out.resize(relay::Socks5Client::kMaxOutput);
  out.resize(c.write_output(out.data()));
  c.take_output();
  return out;
}

}  // namespace

void StreamCloser::operator()(UpstreamStream* s) const { s->close(); }

UpstreamStream* UpstreamStream::create(const StreamContext& ctx, StreamEvents& events, StreamRoute route) {
  return new UpstreamStream(ctx, events, std::move(route));
}

UpstreamStream::UpstreamStream(const StreamContext& ctx, StreamEvents& events, StreamRoute route)
    : ctx_(ctx), events_(&events), route_(std::move(route)), timer_(this) {
  if (ctx_.live_objects) ++*ctx_.live_objects;
}

UpstreamStream::~UpstreamStream() {
  if (fd_ >= 0) ::close(fd_);
  if (ctx_.live_objects) --*ctx_.live_objects;
}

void UpstreamStream::start() {
  if (!route_.egress) {
    addresses_ = {route_.resolver.ip};
    connect_next();
    return;
  }
  const auto& ep = route_.egress->endpoint;
  if (ep.ip) {
    addresses_ = {*ep.ip};
    connect_next();
    return;
  }
  // The endpoint is resolved on every dial and each address checked before use.
  inflight_ |= 1u << kResolve;
  ctx_.resolve(ep.host, [this](Result<std::vector<policy::IpAddress>> r) { on_resolved(std::move(r)); });
}

void UpstreamStream::on_resolved(Result<std::vector<policy::IpAddress>> addrs) {
  inflight_ &= static_cast<uint8_t>(~(1u << kResolve));
  if (phase_ == Phase::closed) return maybe_release();
  if (!addrs.ok()) return fail("resolve " + route_.egress->endpoint.host + ": " + addrs.error().message);
  if (addrs->empty()) return fail("resolve " + route_.egress->endpoint.host + ": no address");
  addresses_ = std::move(*addrs);
  connect_next();
}

void UpstreamStream::connect_next() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  while (next_address_ < addresses_.size()) {
    const policy::IpAddress ip = addresses_[next_address_++];
    // "connect only to an address that passed the check" (a direct resolver address
    // was checked when the policy was written; an Egress endpoint on every dial).
    if (route_.egress) {
      if (auto st = ctx_.address_policy.check(ip); !st) {
        last_error_ = st.error().message;
        continue;
      }
    }
    const uint16_t port = route_.egress ? route_.egress->endpoint.port : route_.resolver.port;
    peer_ = SocketAddress{ip, port};
    fd_ = ::socket(ip.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0) {
      last_error_ = std::string("socket: ") + strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const socklen_t len = peer_.to_sockaddr(peer_ss_);
    phase_ = Phase::connecting;
    ctx_.loop.timers().arm(timer_, ctx_.loop.now_ms() + ctx_.handshake_ms);
    io_uring_sqe* sqe = ctx_.loop.sqe(this, kConnect);
    io_uring_prep_connect(sqe, fd_, reinterpret_cast<const sockaddr*>(&peer_ss_), len);
    sqe->user_data = uring::encode_user_data(this, kConnect);
    inflight_ |= 1u << kConnect;
    return;
  }
  fail(last_error_.empty() ? "no usable address" : last_error_);
}

void UpstreamStream::on_connected(int32_t res) {
  if (res < 0) {
    // ECANCELED: the dial timer cancelled it and already said why.
    if (res != -ECANCELED) last_error_ = "connect " + peer_.to_string() + ": " + strerror(-res);
    return connect_next();
  }
  arm_recv();
  begin_handshake();
}

void UpstreamStream::begin_handshake() {
  if (!route_.egress) return become_ready(std::nullopt);
  if (route_.egress->tls) {
    auto tls = relay::TlsSession::create(route_.egress->tls);
    if (!tls.ok()) return fail("tls: " + tls.error().message);
    tls_ = std::move(*tls);
    phase_ = Phase::tls;
    return drive_tls();
  }
  start_socks();
}

void UpstreamStream::start_socks() {
  phase_ = Phase::socks;
  sockaddr_storage dst;
  route_.resolver.to_sockaddr(dst);
  socks_ = std::make_unique<relay::Socks5Client>(route_.egress->credentials, reinterpret_cast<sockaddr*>(&dst));
  socks_->start();
  send_plain(take_socks_output(*socks_));
}

void UpstreamStream::drive_tls() {
  const auto io = tls_->handshake();
  flush();
  if (io == relay::TlsSession::Io::want_read) return;
  if (io != relay::TlsSession::Io::ok) return fail("tls handshake: " + tls_->last_error());
  start_socks();
}

void UpstreamStream::send_plain(ByteView data) {
  if (tls_) {
    if (tls_->write(data.data(), data.size()) == relay::TlsSession::Io::error)
      return fail("tls write: " + tls_->last_error());
  } else {
    out_.insert(out_.end(), data.begin(), data.end());
  }
  flush();
}

void UpstreamStream::write(ByteView data) {
  if (phase_ != Phase::ready) return;
  send_plain(data);
}

void UpstreamStream::flush() {
  if (tls_) {
    while (tls_->pending_out() > 0) {
      const size_t at = out_.size();
      out_.resize(at + tls_->pending_out());
      out_.resize(at + tls_->take_out(out_.data() + at, out_.size() - at));
    }
  }
  if (in_flight(kSend) || out_.empty() || fd_ < 0 || phase_ == Phase::closed) return;
  sending_.swap(out_);
  out_.clear();
  send_off_ = 0;
  io_uring_sqe* sqe = ctx_.loop.sqe(this, kSend);
  io_uring_prep_send(sqe, fd_, sending_.data(), sending_.size(), MSG_NOSIGNAL);
  sqe->user_data = uring::encode_user_data(this, kSend);
  inflight_ |= 1u << kSend;
}

void UpstreamStream::arm_recv() {
  io_uring_sqe* sqe = ctx_.loop.sqe(this, kRecv);
  io_uring_prep_recv(sqe, fd_, in_.data(), in_.size(), 0);
  sqe->user_data = uring::encode_user_data(this, kRecv);
  inflight_ |= 1u << kRecv;
}

void UpstreamStream::complete(unsigned tag, int32_t res, uint32_t) {
  inflight_ &= static_cast<uint8_t>(~(1u << tag));
  if (phase_ == Phase::closed) return maybe_release();
  switch (tag) {
    case kConnect: return on_connected(res);
    case kSend:
      if (res < 0) return fail(std::string("send: ") + strerror(-res));
      send_off_ += static_cast<size_t>(res);
      if (send_off_ < sending_.size()) {
        // A short send: the rest goes first, before anything queued after it.
        Bytes rest(sending_.begin() + static_cast<std::ptrdiff_t>(send_off_), sending_.end());
        rest.insert(rest.end(), out_.begin(), out_.end());
        out_.swap(rest);
      }
      sending_.clear();
      send_off_ = 0;
      return flush();
    case kRecv:
      if (res == 0) return fail("closed by the peer");
      if (res < 0) return fail(std::string("recv: ") + strerror(-res));
      on_bytes(ByteView(in_.data(), static_cast<size_t>(res)));
      if (phase_ != Phase::closed) arm_recv();
      return;
    default: return;
  }
}

void UpstreamStream::on_bytes(ByteView bytes) {
  if (!tls_) return on_plaintext(bytes);
  tls_->feed(bytes.data(), bytes.size());
  if (phase_ == Phase::tls) return drive_tls();
  uint8_t plain[16384];
  for (;;) {
    size_t n = 0;
    const auto io = tls_->read(plain, sizeof plain, &n);
    if (io == relay::TlsSession::Io::ok && n > 0) {
      on_plaintext(ByteView(plain, n));
      if (phase_ == Phase::closed) return;
      continue;
    }
    flush();  // TLS may have something to say (key updates, alerts)
    if (io == relay::TlsSession::Io::want_read) return;
    if (io == relay::TlsSession::Io::closed) return fail("TLS closed by the peer");
    return fail("tls read: " + tls_->last_error());
  }
}

void UpstreamStream::on_plaintext(ByteView data) {
  if (phase_ == Phase::ready) return events_->on_stream_data(data);
  if (phase_ == Phase::socks) {
    const size_t used = socks_->feed(data.data(), data.size());
    data = data.subspan(used);
    if (socks_->state() == relay::Socks5Client::State::failed)
      return fail(std::string("socks5: ") + std::string(relay::socks5_failure_name(socks_->failure())));
    Bytes next = take_socks_output(*socks_);
    if (socks_->state() == relay::Socks5Client::State::connect && route_.udp_associate) {
      // Greeting and auth are done: the client's CONNECT is replaced by ASSOCIATE.
      // The datagrams' source is not known yet (the UDP socket's family follows the
      // relay address): "the client MUST use a port number and address of all zeros".
      SocketAddress zeros;
      zeros.ip.family = peer_.ip.family;
      phase_ = Phase::associate;
      send_plain(encode_udp_associate_request(zeros));
    } else {
      if (!next.empty()) send_plain(next);
      if (socks_->state() == relay::Socks5Client::State::done) {
        become_ready(std::nullopt);
        if (!data.empty() && phase_ == Phase::ready) events_->on_stream_data(data);
        return;
      }
    }
    if (phase_ != Phase::associate || data.empty()) return;
  }
  if (phase_ == Phase::associate) {
    auto reply = associate_reply_.feed(data);
    if (!reply.ok()) return fail(reply.error().message);
    if (!reply->has_value()) return;
    auto relay = relay_address_from_reply(**reply, peer_, ctx_.address_policy);
    if (!relay.ok()) return fail(relay.error().message);
    return become_ready(*relay);
  }
}

void UpstreamStream::become_ready(const std::optional<SocketAddress>& relay) {
  timer_.cancel();
  phase_ = Phase::ready;
  socks_.reset();
  events_->on_stream_ready(relay);
}

void UpstreamStream::on_timer(uring::Timer&) {
  if (phase_ == Phase::closed || phase_ == Phase::ready) return;
  last_error_ = "timed out dialing " + peer_.to_string();
  if (in_flight(kConnect)) ctx_.loop.cancel(this, kConnect);  // its CQE moves on
  else fail(last_error_);
}

void UpstreamStream::fail(const std::string& reason) {
  if (phase_ == Phase::closed) return;
  StreamEvents* ev = events_;
  close();
  ev->on_stream_closed(reason);
}

void UpstreamStream::close() {
  if (phase_ == Phase::closed) return;
  phase_ = Phase::closed;
  events_ = nullptr;
  timer_.cancel();
  for (unsigned tag : {kConnect, kRecv, kSend})
    if (in_flight(tag)) ctx_.loop.cancel(this, tag);
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);  // wakes a pending recv at once
  maybe_release();
}

void UpstreamStream::maybe_release() {
  if (phase_ != Phase::closed || inflight_ != 0) return;
  ctx_.loop.post([this] { delete this; });
  inflight_ = 0xff;  // never posted twice
}

}  // namespace kib::dns
