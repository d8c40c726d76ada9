#include "agent/dns/upstream_stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kib::dns {

void StreamCloser::operator()(UpstreamStream* s) const { s->close(); }

UpstreamStream* UpstreamStream::create(const StreamContext& ctx, StreamEvents& events, StreamRoute route) {
  return new UpstreamStream(ctx, events, std::move(route));
}

UpstreamStream::UpstreamStream(const StreamContext& ctx, StreamEvents& events, StreamRoute route)
    : uring::OpOwner(ctx.loop), ctx_(ctx), events_(&events), route_(std::move(route)), timer_(this) {
  if (ctx_.live_objects) ++*ctx_.live_objects;
}

UpstreamStream::~UpstreamStream() {
  if (ctx_.live_objects) --*ctx_.live_objects;
}

void UpstreamStream::start() {
  relay::DialPlan plan{.destination = route_.resolver};
  if (route_.egress) {
    plan.egress = route_.egress.get();
    plan.command = route_.udp_associate ? relay::Socks5Command::udp_associate : relay::Socks5Command::connect;
    plan.address_policy = &ctx_.address_policy;
  }
  dial_ = std::make_unique<relay::EgressDial>(plan);
  advance(dial_->start());
}

// Carries out the step the dial (relay/egress_dial.h) asks for next.
void UpstreamStream::advance(relay::EgressDial::Step step) {
  using Step = relay::EgressDial::Step;
  switch (step) {
    case Step::resolve:
      hold(kResolve);
      return ctx_.resolve(dial_->host(),
                          [this](Result<std::vector<policy::IpAddress>> r) { on_resolved(std::move(r)); });
    case Step::connect: return connect_now();
    case Step::exchange: return flush();
    case Step::dialed: return on_dialed();
    case Step::failed: return fail(dial_->failure().reason);
  }
}

void UpstreamStream::on_resolved(Result<std::vector<policy::IpAddress>> addrs) {
  if (phase_ == Phase::closed) return unhold(kResolve);  // may release: nothing after it
  unhold(kResolve);
  advance(dial_->on_resolved(std::move(addrs)));
}

void UpstreamStream::connect_now() {
  const relay::SocketAddress& peer = dial_->peer();
  socket_ = uring::SocketHandle(UniqueFd(::socket(peer.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
  if (!socket_.valid()) return advance(dial_->on_connected(errno));
  int one = 1;
  setsockopt(socket_.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  phase_ = Phase::connecting;
  connect_timed_out_ = false;
  // One deadline per address for the connect and the handshake after it.
  ctx_.loop.timers().arm(timer_, ctx_.loop.now_ms() + ctx_.handshake_ms);
  io_uring_sqe* sqe = start_op(kConnect);
  io_uring_prep_connect(sqe, socket_.fd(), &peer.sa, peer.length());
}

void UpstreamStream::on_connected(int32_t res) {
  if (res < 0) return advance(dial_->on_connected(connect_timed_out_ ? ETIMEDOUT : -res));
  phase_ = Phase::handshake;
  arm_recv();
  advance(dial_->on_connected(0));
}

// For UDP ASSOCIATE the reply's relay address must pass the check too; for CONNECT,
// bytes after the reply are the resolver's.
void UpstreamStream::on_dialed() {
  timer_.cancel();
  tls_ = dial_->take_tls();
  std::optional<SocketAddress> relay;
  if (route_.egress && route_.udp_associate) {
    const relay::Socks5Bound b = dial_->bound();
    Socks5Reply reply;
    if (b.is_domain)
      reply.bound.host = std::string();
    else
      reply.bound = {policy::IpAddress::from_sockaddr(&b.address.sa), b.address.port()};
    auto checked =
        relay_address_from_reply(reply, SocketAddress::from_sockaddr(&dial_->peer().sa), ctx_.address_policy);
    if (!checked.ok()) return fail(checked.error().message);
    relay = *checked;
  }
  dial_.reset();
  phase_ = Phase::ready;
  events_->on_stream_ready(relay);
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
  while (dial_ && dial_->pending_out() > 0) {
    const size_t at = out_.size();
    out_.resize(at + dial_->pending_out());
    out_.resize(at + dial_->take_out(out_.data() + at, out_.size() - at));
  }
  if (tls_) {
    while (tls_->pending_out() > 0) {
      const size_t at = out_.size();
      out_.resize(at + tls_->pending_out());
      out_.resize(at + tls_->take_out(out_.data() + at, out_.size() - at));
    }
  }
  if (in_flight(kSend) || out_.empty() || !socket_.valid() || phase_ == Phase::closed) return;
  sending_.swap(out_);
  out_.clear();
  send_off_ = 0;
  io_uring_sqe* sqe = start_op(kSend);
  io_uring_prep_send(sqe, socket_.fd(), sending_.data(), sending_.size(), MSG_NOSIGNAL);
}

void UpstreamStream::arm_recv() {
  io_uring_sqe* sqe = start_op(kRecv);
  io_uring_prep_recv(sqe, socket_.fd(), in_.data(), in_.size(), 0);
}

void UpstreamStream::on_complete(unsigned tag, int32_t res, uint32_t) {
  if (phase_ == Phase::closed) return;
  switch (tag) {
    case kConnect: return on_connected(res);
    case kSend:
      if (res < 0 && dial_) return advance(dial_->on_io_error("send", -res));
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
      if (dial_) return on_dial_bytes(res);
      if (res == 0) return fail("closed by the peer");
      if (res < 0) return fail(std::string("recv: ") + strerror(-res));
      on_bytes(ByteView(in_.data(), static_cast<size_t>(res)));
      if (phase_ != Phase::closed) arm_recv();
      return;
    default: return;
  }
}

void UpstreamStream::on_dial_bytes(int32_t res) {
  if (res == 0) return advance(dial_->on_closed());
  if (res < 0) return advance(dial_->on_io_error("recv", -res));
  const auto len = static_cast<size_t>(res);
  const auto step = dial_->on_received(in_.data(), len);
  const size_t used = dial_->consumed();
  advance(step);
  if (phase_ == Phase::ready) {
    // Without TLS what followed the reply is in in_; inside TLS, in the session.
    if (used < len) events_->on_stream_data(ByteView(in_.data() + used, len - used));
    if (tls_ && phase_ == Phase::ready) on_bytes(ByteView());
  }
  if (phase_ != Phase::closed) arm_recv();
}

void UpstreamStream::on_bytes(ByteView bytes) {
  if (!tls_) return events_->on_stream_data(bytes);
  if (!bytes.empty()) tls_->feed(bytes.data(), bytes.size());
  uint8_t plain[16384];
  for (;;) {
    size_t n = 0;
    const auto io = tls_->read(plain, sizeof plain, &n);
    if (io == relay::TlsSession::Io::ok && n > 0) {
      events_->on_stream_data(ByteView(plain, n));
      if (phase_ == Phase::closed) return;
      continue;
    }
    flush();  // TLS may have something to say (key updates, alerts)
    if (io == relay::TlsSession::Io::want_read) return;
    if (io == relay::TlsSession::Io::closed) return fail("TLS closed by the peer");
    return fail("tls read: " + tls_->last_error());
  }
}

void UpstreamStream::on_timer(uring::Timer&) {
  if (phase_ == Phase::closed || phase_ == Phase::ready) return;
  if (in_flight(kConnect)) {
    connect_timed_out_ = true;
    cancel_op(kConnect);  // its CQE tries the next address
    return;
  }
  advance(dial_->on_timeout());
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
  if (socket_.fd() >= 0) ::shutdown(socket_.fd(), SHUT_RDWR);  // wakes a pending recv at once
  close_ops();
}

// Deleted from the loop, not here: close() may run inside a caller's own event.
void UpstreamStream::on_released() {
  ctx_.loop.post([this] { delete this; });
}

}  // namespace kib::dns
