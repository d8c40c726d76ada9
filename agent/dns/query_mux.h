#pragma once
// One workspace's DNS queries in flight: "Queries go to the policy's resolvers in
// order, with a per-query timeout and failover to the next; the query ID and the
// guest's 5-tuple are restored on the answer."
//
// Pure bookkeeping, no I/O: the caller sends what a Dispatch says on resolver
// `resolver`'s channel, feeds back what the channel receives, and calls expire() when
// next_deadline() passes. Each resolver index is one upstream channel with its own ID
// space.
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "agent/dns/dns_counters.h"
#include "agent/dns/dns_message.h"
#include "agent/dns/socket_address.h"
#include "agent/dns/upstream_ids.h"

namespace kib::dns {

using Clock = std::chrono::steady_clock;

// Where a guest's query came from, so the answer goes back there.
struct GuestOrigin {
  SocketAddress guest;          // the guest's source address and port
  SocketAddress asked;          // the original destination the guest sent to
  uint64_t tcp_connection = 0;  // 0: UDP; otherwise the guest's TCP connection
  bool is_udp() const { return tcp_connection == 0; }
};

struct QueryMuxOptions {
  size_t resolver_count = 1;
  std::chrono::milliseconds attempt_timeout{2000};  // per resolver tried
  size_t max_in_flight = 4096;                      // per workspace
  size_t max_query_size = 4096;                     // bytes; guests send far less
};

// Send `message` (the query with its upstream ID) to resolver `resolver`.
struct Dispatch {
  uint64_t query = 0;
  size_t resolver = 0;
  Bytes message;
  bool guest_tcp = false;  // the guest asked over TCP (it wants an untruncated answer)
};

// Send `message` to the guest at `origin` (an answer with the guest's ID, or the
// agent's own SERVFAIL when every resolver failed).
struct Delivery {
  GuestOrigin origin;
  Bytes message;
};

struct MuxActions {
  std::vector<Dispatch> dispatches;
  std::vector<Delivery> deliveries;
};

class QueryMux {
 public:
  explicit QueryMux(QueryMuxOptions options);

  // A guest's query: dispatched to the first resolver. resource_exhausted at the
  // in-flight cap, invalid_argument for a malformed query; both counted, and the
  // guest gets nothing (it retries, as after a lost datagram).
  Result<Dispatch> submit(const GuestOrigin& origin, ByteView query, Clock::time_point now);

  // A message received on resolver `resolver`'s channel. An answer to a query in
  // flight there is delivered with the guest's ID (fitted to the guest's UDP size
  // when the guest asked over UDP; a truncated answer is passed on as is so the guest
  // retries over TCP). SERVFAIL and REFUSED fail over to the next resolver while
  // there is one. Anything else is dropped and counted.
  MuxActions answer(size_t resolver, ByteView message, Clock::time_point now);

  // Queries whose attempt timed out fail over to the next resolver; after the last
  // one the guest gets SERVFAIL.
  MuxActions expire(Clock::time_point now);

  // Resolver `resolver`'s channel broke (send error, association or connection lost):
  // its queries fail over at once.
  MuxActions resolver_failed(size_t resolver, Clock::time_point now);

  // The guest's TCP connection closed: its queries are forgotten.
  void forget_connection(uint64_t tcp_connection);

  std::optional<Clock::time_point> next_deadline() const;
  size_t in_flight() const { return pending_.size(); }
  // The cap in force (the option, at most one ID space).
  size_t max_in_flight() const { return options_.max_in_flight; }
  size_t in_flight_on(size_t resolver) const { return ids_[resolver].size(); }
  const DnsCounters& counters() const { return counters_; }

 private:
  struct Pending {
    GuestOrigin origin;
    Bytes query;  // as the guest sent it, for failover and SERVFAIL
    QueryInfo info;
    size_t resolver = 0;
    uint16_t upstream_id = 0;
    Clock::time_point deadline;
  };

  // Sends query q to `resolver` (or the next one that has a free ID); false when none.
  bool dispatch_to(uint64_t q, Pending& p, size_t resolver, Clock::time_point now, MuxActions& out);
  void unlink(uint64_t q, Pending& p);
  // Moves q to the next resolver, or gives up with SERVFAIL counted as `reason`.
  void fail_over(uint64_t q, FailureReason reason, Clock::time_point now, MuxActions& out);

  QueryMuxOptions options_;
  std::vector<UpstreamIds> ids_;  // one ID space per resolver channel
  std::unordered_map<uint64_t, Pending> pending_;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines_;
  uint64_t next_query_ = 1;
  DnsCounters counters_;
};

}  // namespace kib::dns
