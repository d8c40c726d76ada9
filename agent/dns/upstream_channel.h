#pragma once
// One resolver's upstream channel for one workspace: what carries its queries and
// brings back its answers. Kinds: plain UDP from the host namespace, UDP through a
// SOCKS5 UDP ASSOCIATE, DNS over TCP (straight or through an Egress CONNECT).
#include <cstdint>
#include <memory>
#include <string>

#include "agent/dns/dns_message.h"
#include "agent/dns/upstream_stream.h"

namespace kib::dns {

class ChannelEvents {
 public:
  // A DNS message from the resolver (any ID: the mux checks it).
  virtual void on_channel_answer(size_t resolver, ByteView message) = 0;
  // The channel broke; its queries must fail over. The owner closes it.
  virtual void on_channel_failed(size_t resolver, const std::string& reason) = 0;

 protected:
  ~ChannelEvents() = default;
};

class UpstreamChannel {
 public:
  // Queued while the channel is being set up (bounded; beyond, dropped and left to
  // the query timeout). An error means the channel is broken: the caller fails its
  // queries over and closes it (no event is sent from inside send()).
  virtual Status send(ByteView query) = 0;
  // Events may come from inside open_*_channel already (a failed setup); the owner
  // must accept an event for a resolver whose channel it has not stored yet.
  // No event after this; the channel deletes itself once its operations are done.
  virtual void close() = 0;
  // For status: "connecting", "associating", "ready" or "associated".
  virtual std::string state() const = 0;
  // The SOCKS5 relay address of an association ("ip:port"), else empty.
  virtual std::string relay_address() const { return {}; }

 protected:
  virtual ~UpstreamChannel() = default;
};

struct ChannelCloser {
  void operator()(UpstreamChannel* c) const { c->close(); }
};
using ChannelPtr = std::unique_ptr<UpstreamChannel, ChannelCloser>;

// Plain UDP to the resolver (route.egress null) or UDP ASSOCIATE through it. A
// failure while setting up may already be reported through events, or later.
Result<ChannelPtr> open_udp_channel(const StreamContext& ctx, ChannelEvents& events, size_t resolver,
                                    const StreamRoute& route);
// DNS over TCP, straight or through an Egress CONNECT; queries pipelined.
Result<ChannelPtr> open_tcp_channel(const StreamContext& ctx, ChannelEvents& events, size_t resolver,
                                    const StreamRoute& route);

}  // namespace kib::dns
