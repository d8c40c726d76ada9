#pragma once
// One Workspace's DNS on the DNS loop: the guest sockets TPROXY feeds, the query
// multiplexer, one upstream channel per resolver, reply sockets. "Queries go to the
// policy's resolvers in order, with a per-query timeout and failover to the next."
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/dns/guest_sockets.h"
#include "agent/dns/query_mux.h"
#include "agent/dns/reply_socket_cache.h"
#include "agent/dns/upstream_channel.h"
#include "kibotos/ctrl/v1/workspace.pb.h"

namespace kib::dns {

struct ResolverRoute {
  bool tcp = false;
  SocketAddress address;
  std::string egress_id;  // empty: straight from the host namespace
  bool operator==(const ResolverRoute&) const = default;
};

// invalid_argument naming the entry for an address that is not ip:port.
Result<std::vector<ResolverRoute>> resolver_routes(const ::kibotos::ctrl::v1::NetworkPolicy& policy);

struct WorkspaceDnsOptions {
  std::chrono::milliseconds attempt_timeout{2000};
  size_t max_in_flight = 4096;
  size_t reply_sockets = 256;
  size_t max_guest_tcp_connections = 256;
  uint64_t channel_idle_ms = 60000;
  uint64_t guest_tcp_idle_ms = 10000;  // a guest's DNS-over-TCP connection with nothing pending
};

struct ResolverState {
  bool tcp = false;
  std::string address;        // "10.0.0.53:53"
  std::string egress_id;      // empty: straight from the host namespace
  std::string state;          // "idle", "connecting", "associating", "ready", "associated"
  std::string relay_address;  // of an association, else empty
  uint64_t egress_revision = 0;
  uint64_t egress_held = 0;  // the Egress revision a new channel opens with; 0: none held
  std::string last_error;
};

// "udp 10.0.0.53:53 via egress-1", for logs and error messages.
std::string resolver_label(const ResolverState& r);

struct WorkspaceDnsStatus {
  uint64_t policy_revision = 0;
  DnsCounters counters;
  size_t in_flight = 0;
  size_t max_in_flight = 0;
  std::vector<ResolverState> resolvers;
};

// The newest DialTarget of an Egress, or null when it is unknown or deleted.
using EgressLookup = std::function<relay::DialTargetPtr(const std::string& egress_id)>;
// Opens a transparent reply socket bound to `asked` inside the workspace namespace.
using ReplyOpener = ReplySocketCache::Opener;

class WorkspaceDns final : private GuestEvents, private ChannelEvents, private uring::TimerHandler {
 public:
  WorkspaceDns(const StreamContext& ctx, EgressLookup egresses, ReplyOpener opener, const WorkspaceDnsOptions& options,
               uint64_t policy_revision, std::vector<ResolverRoute> resolvers);
  ~WorkspaceDns();

  void add_udp_listener(UniqueFd fd);
  void add_tcp_listener(UniqueFd fd);
  // Take-over: the guests' queries go to the next agent's sockets now. Queries in
  // flight still get their answers from the reply sockets.
  void close_listeners();
  // A new policy: unchanged resolvers keep their channels and queries in flight.
  void set_resolvers(uint64_t policy_revision, std::vector<ResolverRoute> resolvers);
  // A new revision of an Egress: its channels of older revisions drain (at most
  // drain_seconds, and no longer than a query can wait for its answer).
  void egress_published(const std::string& egress_id, uint32_t drain_seconds);
  // The Egress is gone: its channels close at once.
  void egress_deleted(const std::string& egress_id);
  WorkspaceDnsStatus status() const;

 private:
  struct Slot {  // a channel and the resolver it serves
    ChannelPtr channel;
    size_t resolver = 0;
    uint64_t egress_revision = 0;
    uint64_t last_used_ms = 0;
    uint64_t drain_deadline_ms = 0;  // 0: the resolver's active channel
    bool tcp = false;                // DNS over TCP (a tcp resolver, or a udp one's twin)
  };

  // GuestEvents
  void on_guest_udp_query(const SocketAddress& guest, const SocketAddress& asked, ByteView query) override;
  void on_guest_tcp_accept(UniqueFd fd, const SocketAddress& guest, const SocketAddress& asked) override;
  void on_guest_tcp_query(uint64_t connection, ByteView query) override;
  void on_guest_tcp_closed(uint64_t connection) override;
  // ChannelEvents (the "resolver" argument is the slot token)
  void on_channel_answer(size_t token, ByteView message) override;
  void on_channel_failed(size_t token, const std::string& reason) override;
  void on_timer(uring::Timer& t) override;

  void submit(const GuestOrigin& origin, ByteView query);
  void run(MuxActions actions);
  void dispatch(const Dispatch& d);
  void deliver(const Delivery& d);
  // A guest's TCP query to a udp resolver goes over TCP to the same address (through
  // the same Egress, with CONNECT): a UDP answer could come back truncated, and the
  // guest already asked over TCP.
  bool uses_tcp(const Dispatch& d) const { return resolvers_[d.resolver].tcp || d.guest_tcp; }
  Slot* active_slot(size_t resolver, bool tcp, uint64_t* token);
  Result<uint64_t> open_slot(size_t resolver, bool tcp);
  void close_slot(uint64_t token);
  void rearm();
  // The mux's time is the loop's (LoopOptions::clock; CLOCK_MONOTONIC like
  // steady_clock by default), so that attempt deadlines and the timer that expires
  // them read one clock, which tests step.
  Clock::time_point now() const { return Clock::time_point(std::chrono::milliseconds(ctx_.loop.now_ms())); }
  void reset_resolvers(std::vector<ResolverRoute> resolvers);

  const StreamContext& ctx_;
  EgressLookup egresses_;
  WorkspaceDnsOptions options_;
  uint64_t policy_revision_;
  std::vector<ResolverRoute> resolvers_;
  std::vector<std::string> last_errors_;
  std::unique_ptr<QueryMux> mux_;
  ReplySocketCache replies_;
  std::map<uint64_t, Slot> slots_;
  uint64_t next_token_ = 1;
  std::vector<GuestPtr<GuestUdpListener>> udp_listeners_;
  std::vector<GuestPtr<GuestTcpListener>> tcp_listeners_;
  std::unordered_map<uint64_t, GuestPtr<GuestTcpConnection>> tcp_connections_;
  std::unordered_map<uint64_t, GuestOrigin> tcp_origins_;
  uint64_t next_connection_ = 1;
  uring::Timer timer_;
  DnsCounters retired_counters_;  // of muxes replaced by a policy change
};

}  // namespace kib::dns
