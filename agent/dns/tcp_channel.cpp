// DNS over TCP to a resolver, straight or through an Egress CONNECT: "two-byte length
// framing, pipelined queries on a kept-alive connection".
#include <deque>

#include "agent/dns/tcp_framing.h"
#include "agent/dns/upstream_channel.h"

namespace kib::dns {
namespace {

constexpr size_t kMaxQueued = 1024;              // queries waiting for the connection
constexpr size_t kMaxUnsentBytes = 1024 * 1024;  // a resolver that stops reading

class TcpChannel final : public UpstreamChannel, private StreamEvents {
 public:
  TcpChannel(const StreamContext& ctx, ChannelEvents& events, size_t resolver, StreamRoute route)
      : ctx_(ctx), events_(&events), resolver_(resolver), route_(std::move(route)) {
    if (ctx_.live_objects) ++*ctx_.live_objects;
  }
  ~TcpChannel() override {
    if (ctx_.live_objects) --*ctx_.live_objects;
  }

  void open() {
    stream_.reset(UpstreamStream::create(ctx_, *this, route_));
    stream_->start();
  }

  Status send(ByteView query) override {
    if (closed_ || failed_) return make_error(Code::unavailable, "channel broken: " + failure_);
    if (!stream_ || !stream_->ready()) {
      if (queued_.size() < kMaxQueued) queued_.emplace_back(query.begin(), query.end());
      return {};
    }
    if (stream_->queued_bytes() > kMaxUnsentBytes) return {};  // dropped; times out
    Bytes frame;
    KIB_TRY(append_frame(frame, query));
    stream_->write(frame);
    return {};
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    events_ = nullptr;
    stream_.reset();
    // No operation of its own: the stream releases itself.
    ctx_.loop.post([this] { delete this; });
  }

  std::string state() const override { return stream_ && stream_->ready() ? "ready" : "connecting"; }

 private:
  void on_stream_ready(const std::optional<SocketAddress>&) override {
    std::deque<Bytes> queued;
    queued.swap(queued_);
    for (const auto& q : queued) {
      if (closed_ || failed_) return;
      (void)send(q);
    }
  }

  void on_stream_data(ByteView data) override {
    frames_.feed(data);
    for (;;) {
      auto next = frames_.next();
      if (!next.ok()) return fail(next.error().message);
      if (!next->has_value()) return;
      events_->on_channel_answer(resolver_, **next);
      if (closed_) return;
    }
  }

  void on_stream_closed(const std::string& reason) override {
    (void)stream_.release();  // it closed itself
    fail(reason);
  }

  void fail(const std::string& reason) {
    if (closed_ || failed_) return;
    failed_ = true;
    failure_ = reason;
    stream_.reset();
    events_->on_channel_failed(resolver_, reason);
  }

  const StreamContext& ctx_;
  ChannelEvents* events_;
  size_t resolver_;
  StreamRoute route_;
  StreamPtr stream_;
  FrameReassembler frames_;
  std::deque<Bytes> queued_;
  bool closed_ = false;
  bool failed_ = false;
  std::string failure_;
};

}  // namespace

Result<ChannelPtr> open_tcp_channel(const StreamContext& ctx, ChannelEvents& events, size_t resolver,
                                    const StreamRoute& route) {
  auto* c = new TcpChannel(ctx, events, resolver, route);
  ChannelPtr owned(c);
  c->open();
  return owned;
}

}  // namespace kib::dns
