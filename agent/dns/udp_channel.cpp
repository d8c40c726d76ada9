// Plain UDP to a resolver, or UDP through a SOCKS5 UDP ASSOCIATE: "datagrams with
// the RFC 1928 UDP header to the relay address the server answers".
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>

#include "agent/common/errno_error.h"
#include "agent/dns/socks5_udp_header.h"
#include "agent/dns/upstream_channel.h"

namespace kib::dns {
namespace {

constexpr size_t kMaxQueued = 1024;  // queries waiting for the association
constexpr size_t kSocksHeaderRoom = 3 + 1 + 255 + 2;

class UdpChannel final : public UpstreamChannel, private uring::OpOwner, private StreamEvents {
 public:
  UdpChannel(const StreamContext& ctx, ChannelEvents& events, size_t resolver, StreamRoute route)
      : uring::OpOwner(ctx.loop), ctx_(ctx), events_(&events), resolver_(resolver), route_(std::move(route)) {
    if (ctx_.live_objects) ++*ctx_.live_objects;
  }
  ~UdpChannel() override {
    if (ctx_.live_objects) --*ctx_.live_objects;
  }

  Status open() {
    if (!route_.egress) return open_socket(route_.resolver);
    control_.reset(UpstreamStream::create(ctx_, *this, route_));
    control_->start();
    return {};
  }

  Status send(ByteView query) override {
    if (closing() || failed_) return make_error(Code::unavailable, "channel broken: " + failure_);
    if (!socket_.valid()) {
      if (queued_.size() >= kMaxQueued) return {};  // dropped: the query times out
      queued_.emplace_back(query.begin(), query.end());
      return {};
    }
    return send_now(query);
  }

  void close() override {
    if (closing()) return;
    events_ = nullptr;
    control_.reset();
    close_ops();  // may release: nothing after it
  }

  std::string state() const override {
    if (socket_.valid()) return route_.egress ? "associated" : "ready";
    return "associating";
  }
  std::string relay_address() const override { return socket_.valid() && route_.egress ? relay_.to_string() : ""; }

 private:
  Status open_socket(const SocketAddress& peer) {
    socket_ = uring::SocketHandle(UniqueFd(::socket(peer.family(), SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
    const int fd = socket_.fd();
    if (fd < 0) return errno_error("DNS upstream socket", errno, Code::unavailable);
    // Answers to a burst of queries arrive together.
    int bytes = 4 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
      (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
    // Connected: the kernel drops datagrams from any other source, and an ICMP
    // "port unreachable" comes back as ECONNREFUSED (fast failover).
    if (::connect(fd, &peer.sa, peer.length()) != 0)
      return errno_error("connect DNS upstream " + peer.to_string(), errno, Code::unavailable);
    arm_recv();
    return {};
  }

  Status send_now(ByteView query) {
    ByteView wire = query;
    Bytes framed;
    if (route_.egress) {
      append_socks5_udp_datagram(framed, route_.resolver, query);
      wire = framed;
    }
    if (::send(socket_.fd(), wire.data(), wire.size(), MSG_NOSIGNAL) >= 0) return {};
    const int err = errno;
    if (err == EAGAIN || err == ENOBUFS) return {};  // dropped like on the wire
    return errno_error("send to " + route_.resolver.to_string(), err, Code::unavailable);
  }

  void arm_recv() {
    io_uring_sqe* sqe = start_op(0);
    io_uring_prep_recv(sqe, socket_.fd(), buf_.data(), buf_.size(), 0);
  }

  void on_complete(unsigned, int32_t res, uint32_t) override {
    if (closing()) return;
    if (res < 0) {
      if (res == -EINTR || res == -EAGAIN) return arm_recv();
      return fail(std::string("recv from ") +
                  (route_.egress ? "relay " + relay_.to_string() : route_.resolver.to_string()) + ": " +
                  strerror(-res));
    }
    on_datagram(ByteView(buf_.data(), static_cast<size_t>(res)));
    if (!closing()) arm_recv();
  }

  void on_datagram(ByteView d) {
    if (!route_.egress) return events_->on_channel_answer(resolver_, d);
    auto decoded = decode_socks5_udp_datagram(d);
    if (!decoded.ok()) return;  // fragments and garbage are dropped
    // Only what the relay says came from our resolver is an answer.
    const auto* ip = std::get_if<policy::IpAddress>(&decoded->destination.host);
    if (ip == nullptr || !(*ip == route_.resolver.ip()) || decoded->destination.port != route_.resolver.port()) return;
    events_->on_channel_answer(resolver_, decoded->payload);
  }

  // StreamEvents (the association's control connection).
  void on_stream_ready(const std::optional<SocketAddress>& relay) override {
    if (!relay) return fail("SOCKS5 server gave no relay address");
    relay_ = *relay;
    if (auto st = open_socket(*relay); !st) return fail(st.error().message);
    std::deque<Bytes> queued;
    queued.swap(queued_);
    for (const auto& q : queued) {
      if (auto st = send_now(q); !st) return fail(st.error().message);
    }
  }
  void on_stream_data(ByteView) override {}  // nothing is expected on the control connection
  void on_stream_closed(const std::string& reason) override {
    (void)control_.release();  // it closed itself
    fail("association: " + reason);
  }

  void fail(const std::string& reason) {
    if (closing() || failed_) return;
    failed_ = true;
    failure_ = reason;
    events_->on_channel_failed(resolver_, reason);
  }

  // Deleted from the loop, not here: close() may run inside a caller's own event.
  void on_released() override {
    ctx_.loop.post([this] { delete this; });
  }

  const StreamContext& ctx_;
  ChannelEvents* events_;
  size_t resolver_;
  StreamRoute route_;
  StreamPtr control_;
  SocketAddress relay_;
  uring::SocketHandle socket_;
  bool failed_ = false;
  std::string failure_;
  std::deque<Bytes> queued_;
  std::array<uint8_t, kMaxMessageSize + kSocksHeaderRoom> buf_{};
};

}  // namespace

Result<ChannelPtr> open_udp_channel(const StreamContext& ctx, ChannelEvents& events, size_t resolver,
                                    const StreamRoute& route) {
  auto* c = new UdpChannel(ctx, events, resolver, route);
  ChannelPtr owned(c);
  if (auto st = c->open(); !st) return std::move(st).error();
  return owned;
}

}  // namespace kib::dns
