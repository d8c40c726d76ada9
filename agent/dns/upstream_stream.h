#pragma once
// A TCP stream from the host namespace to a DNS resolver: straight to it, or through
// an Egress (the dial every Egress connection makes, relay/egress_dial.h: resolve,
// check, connect, TLS, SOCKS5, then CONNECT to the resolver or UDP ASSOCIATE). Once ready it carries DNS bytes (TCP
// resolvers) or just stays open to keep the association alive ("the association terminates when the TCP connection that
// the UDP ASSOCIATE request arrived on terminates").
//
// Lives on one uring::Loop. close() stops every event; the object deletes itself
// after the CQE of each operation it submitted.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/dns/dns_message.h"
#include "agent/dns/socket_address.h"
#include "agent/dns/socks5_udp_associate.h"
#include "agent/policy/special_purpose.h"
#include "agent/relay/dial_target.h"
#include "agent/relay/egress_dial.h"
#include "agent/relay/tls_session.h"
#include "uring/loop.h"
#include "uring/op_owner.h"
#include "uring/socket_handle.h"

namespace kib::dns {

using ResolveCallback = std::function<void(Result<std::vector<policy::IpAddress>>)>;
// Resolves an Egress host; the callback must run on the loop's thread, exactly once.
using ResolveFn = std::function<void(const std::string& host, ResolveCallback cb)>;

// What every stream of one engine shares.
struct StreamContext {
  uring::Loop& loop;
  const policy::EndpointAddressPolicy& address_policy;
  ResolveFn resolve;
  uint64_t handshake_ms = 10000;   // connect + TLS + SOCKS5, per address tried
  size_t* live_objects = nullptr;  // streams and channels not yet deleted (shutdown waits)
};

struct StreamRoute {
  SocketAddress resolver;       // the DNS server
  relay::DialTargetPtr egress;  // null: TCP straight to the resolver
  bool udp_associate = false;   // through the Egress: UDP ASSOCIATE, not CONNECT
};

class StreamEvents {
 public:
  // Ready. For UDP ASSOCIATE, relay is the checked relay address.
  virtual void on_stream_ready(const std::optional<SocketAddress>& relay) = 0;
  // Bytes from the resolver (plaintext after TLS).
  virtual void on_stream_data(ByteView data) = 0;
  // The stream failed or ended; no event follows. The stream closes itself.
  virtual void on_stream_closed(const std::string& reason) = 0;

 protected:
  ~StreamEvents() = default;
};

class UpstreamStream;
struct StreamCloser {
  void operator()(UpstreamStream* s) const;
};
// Owns a stream until it is closed (closing hands it to itself).
using StreamPtr = std::unique_ptr<UpstreamStream, StreamCloser>;

class UpstreamStream final : private uring::OpOwner, private uring::TimerHandler {
 public:
  // Events may come from start() already: store the pointer first.
  static UpstreamStream* create(const StreamContext& ctx, StreamEvents& events, StreamRoute route);
  void start();
  // After on_stream_ready. Bounded by the caller (queries in flight are capped).
  void write(ByteView data);
  // No event after this; deletes itself once its operations are done.
  void close();
  bool ready() const { return phase_ == Phase::ready; }
  size_t queued_bytes() const { return out_.size() + (sending_.size() - send_off_); }

 private:
  enum class Phase : uint8_t { resolving, connecting, handshake, ready, closed };
  enum Tag : unsigned { kConnect = 0, kRecv = 1, kSend = 2, kResolve = 3 };

  UpstreamStream(const StreamContext& ctx, StreamEvents& events, StreamRoute route);
  ~UpstreamStream();
  void on_complete(unsigned tag, int32_t res, uint32_t flags) override;
  void on_released() override;
  void on_timer(uring::Timer& t) override;

  void advance(relay::EgressDial::Step step);
  void on_resolved(Result<std::vector<policy::IpAddress>> addrs);
  void connect_now();
  void on_connected(int32_t res);
  void on_dial_bytes(int32_t res);
  void on_dialed();
  void on_bytes(ByteView cipher_or_plain);  // once ready
  void send_plain(ByteView data);           // through TLS when present
  void flush();
  void arm_recv();
  void fail(const std::string& reason);

  const StreamContext& ctx_;
  StreamEvents* events_;
  StreamRoute route_;
  uring::Timer timer_;
  uring::SocketHandle socket_;
  Phase phase_ = Phase::resolving;
  bool connect_timed_out_ = false;
  std::unique_ptr<relay::EgressDial> dial_;  // until ready
  std::unique_ptr<relay::TlsSession> tls_;
  std::array<uint8_t, 16384> in_{};
  Bytes out_;      // waiting to be sent
  Bytes sending_;  // in the send operation in flight
  size_t send_off_ = 0;
};

}  // namespace kib::dns
